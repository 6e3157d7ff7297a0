// flash3 backward, bf16, head dim 64, dK and dV stored 4 bytes a lane (d64's default), head-major order
// (backward_order=head-major).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__nv_bfloat16, 64, false>(const BackwardParams& params, cudaStream_t stream,
                                                     bool vector_preprocess);
}  // namespace attnsuite::cuda::flash3
