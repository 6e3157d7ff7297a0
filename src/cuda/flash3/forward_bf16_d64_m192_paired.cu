// flash3 forward, bf16, head dim 64, kernel config m192 paired (persistent CTAs on every problem,
// units of a head's longest and shortest query tiles, head-major): causal problems, option
// forward_order=paired.
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigM192Paired, __nv_bfloat16>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
