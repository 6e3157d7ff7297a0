// flash3 backward, bf16, head dim 128, the default epilogue and order, dQ written by the main kernel
// (backward_dq_convert=fused; experimental: not yet run on a GPU).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__nv_bfloat16, 128, true, 4, true>(const BackwardParams& params, cudaStream_t stream,
                                                     bool vector_preprocess);
}  // namespace attnsuite::cuda::flash3
