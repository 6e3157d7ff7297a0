// flash3 forward, fp16, head dim 64, option forward_order=longest-first (persistent CTAs on every
// problem, the works in bands of one query tile over all heads, the longest first).
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigD64LongestFirst, __half>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
