// sage2 wgmma (sm_90a) forward, bf16, head dim 64, kernel config "wgmma-pingpong-fmaexp" (ping-pong,
// every 8th 8-key group's exponentials on the FMA pipe).
#include "cuda/sage/wgmma_launch_template.cuh"

namespace attnsuite::cuda::sage::wgmma {
template void run_forward<Mode::Sage2, __nv_bfloat16, 64, Schedule::PingPong, 8>(const Params& params,
                                                                                 cudaStream_t stream);
}  // namespace attnsuite::cuda::sage::wgmma
