// flash3 backward, fp16, head dim 64, dK and dV stored 16 bytes a lane (backward_epilogue=16-byte; experimental).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__half, 64, true>(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess);
}  // namespace attnsuite::cuda::flash3
