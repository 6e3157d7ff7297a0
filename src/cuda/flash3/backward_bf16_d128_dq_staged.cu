// flash3 backward, bf16, head dim 128, dQ reduced through shared memory (backward_dq=staged; experimental).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__nv_bfloat16, 128, DqReduction::Staged>(const BackwardParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
