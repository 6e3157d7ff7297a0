// flash3 backward, fp16, head dim 64: both dQ reductions (atomic, bulk) in one translation unit.
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__half, 64, false, 1>(const BackwardParams& params, cudaStream_t stream);
template void run_backward<__half, 64, true, 1>(const BackwardParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
