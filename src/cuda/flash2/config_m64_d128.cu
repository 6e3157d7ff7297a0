// flash2 alternative configuration m64, head dim 128 (config_alternatives.cuh), fp16 and bf16.
#include "cuda/flash2/config_alternatives.cuh"

namespace attnsuite::cuda::flash2 {
extern const AlternativeConfig kM64D128;
const AlternativeConfig kM64D128{"m64", 128, launch_config<M64Config<__half, 128>>,
                                 launch_config<M64Config<__nv_bfloat16, 128>>};
}  // namespace attnsuite::cuda::flash2
