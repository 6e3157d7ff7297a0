// flash2 backward, bf16, head dim 128: both key tiles (64, 128) in one translation unit.
#include "cuda/flash2/backward_launch_template.cuh"

namespace attnsuite::cuda::flash2 {
template void run_backward<__nv_bfloat16, 128, 64>(const BackwardParams& params, cudaStream_t stream,
                                                   bool vector_preprocess);
template void run_backward<__nv_bfloat16, 128, 128>(const BackwardParams& params, cudaStream_t stream,
                                                    bool vector_preprocess);
}  // namespace attnsuite::cuda::flash2
