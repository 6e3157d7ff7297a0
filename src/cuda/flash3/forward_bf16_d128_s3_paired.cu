// flash3 forward, bf16, head dim 128, kernel config "s3" on persistent CTAs in paired order (the
// order of causal problems). Experimental: not yet run on a GPU.
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigS3Paired, __nv_bfloat16>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
