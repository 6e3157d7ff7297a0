// sage2 wgmma (sm_90a) forward, fp16, head dim 64: one instantiation per translation unit.
#include "cuda/sage/wgmma_launch_template.cuh"

namespace attnsuite::cuda::sage::wgmma {
template void run_forward<Mode::Sage2, __half, 64>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::sage::wgmma
