// flash3 backward, bf16, head dim 64, dK and dV stored 16 bytes a lane (backward_epilogue=16-byte; experimental).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__nv_bfloat16, 64, true>(const BackwardParams& params, cudaStream_t stream,
                                                    bool vector_preprocess);
}  // namespace attnsuite::cuda::flash3
