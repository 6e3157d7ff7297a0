// flash3 backward, fp16, head dim 128, dK and dV stored 16 bytes a lane (d128's default), head-major order
// (backward_order=head-major).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__half, 128, true>(const BackwardParams& params, cudaStream_t stream,
                                              bool vector_preprocess);
}  // namespace attnsuite::cuda::flash3
