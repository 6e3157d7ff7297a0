// flash2 alternative configuration m64, head dim 64 (config_alternatives.cuh), fp16 and bf16.
#include "cuda/flash2/config_alternatives.cuh"

namespace attnsuite::cuda::flash2 {
extern const AlternativeConfig kM64D64;
const AlternativeConfig kM64D64{"m64", 64, launch_config<M64Config<__half, 64>>,
                                launch_config<M64Config<__nv_bfloat16, 64>>};
}  // namespace attnsuite::cuda::flash2
