// flash2 backward, fp16, head dim 128: the tiled main kernel (backward_split=tiles).
#include "cuda/flash2/backward_launch_template.cuh"

namespace attnsuite::cuda::flash2 {
template void run_tiled_backward<__half, 128>(const BackwardParams& params, cudaStream_t stream,
                                              bool vector_preprocess);
}  // namespace attnsuite::cuda::flash2
