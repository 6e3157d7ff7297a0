// flash3 forward, fp16, head dim 256, option forward_order=paired-compact (paired with the per-work
// code compiled once). Experimental: not yet run on a GPU.
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigD256PairedCompact, __half>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
