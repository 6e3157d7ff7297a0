// flash3 forward, fp16, head dim 256: one instantiation per translation unit.
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward<__half, 256>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
