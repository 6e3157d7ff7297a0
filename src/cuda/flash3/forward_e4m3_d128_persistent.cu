// flash3-fp8 forward, e4m3 Q/K/V, bf16 O, head dim 128, option forward_order=persistent on
// problems without a causal mask: persistent CTAs, head-major (forward_order=persistent, or built in at
// short N).
#include "cuda/flash3/fp8_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_fp8_forward<128, true, hopper::WorkOrder::HeadMajor>(const Params& params, const float* descales,
                                                                       cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
