// flash3 backward, bf16, head dim 64, the default epilogue, persistent CTAs over the head-major order
// (backward_order=persistent; experimental).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__nv_bfloat16, 64, false, 1, true>(const BackwardParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
