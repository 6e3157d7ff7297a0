// flash3 forward, bf16, head dim 128, kernel config "s3" (three K/V stages; experimental: not yet
// run on a GPU).
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigS3, __nv_bfloat16>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
