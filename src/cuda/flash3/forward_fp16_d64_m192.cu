// flash3 forward, fp16, head dim 64, kernel config "m192" (three consumer warpgroups).
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward_config<ConfigM192, __half>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
