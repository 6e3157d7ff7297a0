// flash3-fp8 forward, e4m3 Q/K/V, bf16 O, head dim 64, option forward_order=persistent on causal
// problems: persistent CTAs over units of a head's longest and shortest query tiles (the compact
// paired schedule). Experimental: not yet run on a GPU.
#include "cuda/flash3/fp8_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_fp8_forward<64, true, hopper::WorkOrder::PairedCompact>(const Params& params,
                                                                           const float* descales,
                                                                           cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
