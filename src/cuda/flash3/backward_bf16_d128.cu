// flash3 backward, bf16, head dim 128: both dQ reductions (atomic, bulk) in one translation unit.
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__nv_bfloat16, 128, false, 1>(const BackwardParams& params, cudaStream_t stream);
template void run_backward<__nv_bfloat16, 128, true, 1>(const BackwardParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
