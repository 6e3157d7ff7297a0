// The alternative flash2 configurations, by (name, head dim); each config_<name>_d<D>.cu
// instantiates one of them for fp16 and bf16. Included only by those translation units.
//
// m64: 64-row query tiles (4 warps × 16 rows, Q in registers, 64-key K/V tiles) instead of
// 128. Twice the CTAs: a grid of batch·heads·⌈seq_q/128⌉ CTAs that fills the 132 SMs of an
// H200 less than twice over (short sequences, few heads, decode-like seq_q) leaves SMs idle
// with the default tile, while each 16-row warp reads K and V twice as often per FLOP, which
// the default's 32 rows per warp avoid on long sequences (docs/kernels/flash2.md).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/flash2/configs.hpp"
#include "cuda/flash2/launch_template.cuh"

namespace attnsuite::cuda::flash2 {

// Traits<Element, D, TileM, TileN, Warps, Stages, QRegisterTiles, MinBlocksPerSm>
template <class Element, int kHeadDim>
using M64Config = Traits<Element, kHeadDim, 64, 64, 4, 2, 1, 2>;

template <class Kernel>
void launch_config(const Params& params, void* stream) {
  run_kernel<Kernel>(params, static_cast<cudaStream_t>(stream));
}

}  // namespace attnsuite::cuda::flash2
