// sage2 wgmma (sm_90a) forward, bf16, head dim 128, overlap, ping-pong and serial schedules: one
// translation unit per (mode, dtype, head dim).
#include "cuda/sage/wgmma_launch_template.cuh"

namespace attnsuite::cuda::sage::wgmma {
template void run_forward<Mode::Sage2, __nv_bfloat16, 128, Schedule::Overlap>(const Params& params,
                                                                              cudaStream_t stream);
template void run_forward<Mode::Sage2, __nv_bfloat16, 128, Schedule::PingPong>(const Params& params,
                                                                               cudaStream_t stream);
template void run_forward<Mode::Sage2, __nv_bfloat16, 128, Schedule::Serial>(const Params& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::sage::wgmma
