// flash3 backward, fp16, head dim 128, dK and dV stored 4 bytes a lane (backward_epilogue=4-byte).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__half, 128, false>(const BackwardParams& params, cudaStream_t stream,
                                               bool vector_preprocess);
}  // namespace attnsuite::cuda::flash3
