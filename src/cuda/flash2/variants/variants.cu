// Experimental flash2 configurations (built only with -DATTNSUITE_FLASH2_VARIANTS=ON): each is
// registered as a backend `flash2-x-<name>` (bf16, one head dim) so that the device script can
// time candidate configurations against the chosen one and the peers in one harness run. The
// outcomes are recorded in docs/kernels/history/flash2.md; the winners become Config<> in traits.cuh.
#include <cuda_bf16.h>

#include "cuda/flash2/launch_template.cuh"
#include "cuda/flash2/variants/variants.hpp"

namespace attnsuite::cuda::flash2 {
namespace {
using bf16 = __nv_bfloat16;
template <class Kernel>
void launch(const Params& params, void* stream) {
  run_kernel<Kernel>(params, static_cast<cudaStream_t>(stream));
}
// Traits<Element, D, TileM, TileN, Warps, Stages, QRegisterTiles, MinBlocksPerSm>
const Variant kVariants[] = {
    {"d64-s3", 64, launch<Traits<bf16, 64, 128, 64, 4, 3, 2, 2>>},
    {"d128-q1", 128, launch<Traits<bf16, 128, 128, 32, 4, 2, 1, 2>>},
    {"d128-q1-s3", 128, launch<Traits<bf16, 128, 128, 32, 4, 3, 1, 2>>},
    {"d128-s3", 128, launch<Traits<bf16, 128, 128, 32, 4, 3, 0, 2>>},
    {"d128-n64", 128, launch<Traits<bf16, 128, 128, 64, 4, 2, 0, 2>>},
};
}  // namespace

const Variant* variants() { return kVariants; }
std::size_t variant_count() { return sizeof(kVariants) / sizeof(kVariants[0]); }

}  // namespace attnsuite::cuda::flash2
