// flash3 forward, bf16, head dim 256, kernel config "n80" (80-key K/V tiles).
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigN80, __nv_bfloat16>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
