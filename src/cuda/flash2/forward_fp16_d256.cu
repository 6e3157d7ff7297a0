// flash2 forward, fp16, head dim 256: one instantiation per translation unit.
#include "cuda/flash2/launch_template.cuh"

namespace attnsuite::cuda::flash2 {
template void run_forward<__half, 256>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash2
