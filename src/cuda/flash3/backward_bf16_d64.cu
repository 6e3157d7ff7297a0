// flash3 backward (experimental), bf16, head dim 64: one instantiation per translation unit.
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__nv_bfloat16, 64>(const BackwardParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
