// sage wgmma (sm_90a) forward, fp16, head dim 128: one instantiation per translation unit.
#include "cuda/sage/wgmma_launch_template.cuh"

namespace attnsuite::cuda::sage::wgmma {
template void run_forward<Mode::Sage, __half, 128>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::sage::wgmma
