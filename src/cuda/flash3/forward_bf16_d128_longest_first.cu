// flash3 forward, bf16, head dim 128, option forward_order=longest-first (persistent CTAs on every
// problem, the works in bands of one query tile over all heads, the longest first).
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigD128LongestFirst, __nv_bfloat16>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
