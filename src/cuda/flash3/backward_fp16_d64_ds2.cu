// flash3 backward, fp16, head dim 64: dSᵀ double-buffered (backward_ds_buffers=2), both dQ reductions.
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__half, 64, false, 2>(const BackwardParams& params, cudaStream_t stream);
template void run_backward<__half, 64, true, 2>(const BackwardParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
