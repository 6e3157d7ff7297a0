// flash3 backward, fp16, head dim 64, dQ added by bulk reductions (backward_dq=bulk; experimental).
#include "cuda/flash3/backward_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_backward<__half, 64, DqReduction::Bulk>(const BackwardParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
