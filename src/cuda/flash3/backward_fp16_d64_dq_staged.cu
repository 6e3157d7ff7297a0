// flash3 backward, fp16, head dim 64, dQ reduced through shared memory (backward_dq=staged; experimental).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__half, 64, DqReduction::Staged>(const BackwardParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
