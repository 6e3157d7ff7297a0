// flash3 forward, fp16, head dim 256, option forward_order=paired (persistent CTAs on every
// problem, units of a head's longest and shortest query tiles, head-major).
// The built-in order of causal problems at seq_q 1k-4k (flash3.cpp).
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigD256Paired, __half>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
