// flash3-fp8 forward, e4m3 Q/K/V, bf16 O, head dim 128: one instantiation per translation unit.
#include "cuda/flash3/fp8_launch_template.cuh"

namespace attnsuite::cuda::flash3 {
template void run_fp8_forward<128>(const Params& params, const float* descales, cudaStream_t stream);
}  // namespace attnsuite::cuda::flash3
