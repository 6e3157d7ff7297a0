// flash3 forward, bf16, head dim 64, kernel config "m192" with option forward_order=longest-first
// (three consumer warpgroups on persistent CTAs, the works longest first): m192 on windowed problems.
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigM192LongestFirst, __nv_bfloat16>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
