// flash3 backward, bf16, head dim 64, the default epilogue, 4 heads' key tiles interleaved in the grid
// (the default order).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__nv_bfloat16, 64, false, 4>(const BackwardParams& params, cudaStream_t stream,
                                                        bool vector_preprocess);
}  // namespace attnsuite::cuda::flash3
