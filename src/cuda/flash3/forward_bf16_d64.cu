// flash3 forward, bf16, head dim 64: one instantiation per translation unit.
#include "cuda/flash3/launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_forward<__nv_bfloat16, 64>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
