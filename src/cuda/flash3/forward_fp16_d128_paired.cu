// flash3 forward, fp16, head dim 128, paired (persistent CTAs on every problem, units of a head's
// longest and shortest query tiles, head-major): causal problems up to N 8192, option
// forward_order=paired.
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigD128Paired, __half>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
