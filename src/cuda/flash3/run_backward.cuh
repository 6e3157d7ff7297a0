// flash3's backward per (dtype, head dim, epilogue, query tile), each defined and explicitly
// instantiated in its own translation unit (backward_<dtype>_d<head dim>[_wide_epilogue][_m128]
// [_tile_major].cu). kWideEpilogue: dK and dV stored 16 bytes a lane (backward_epilogue=16-byte);
// kTileM = 128: 128-query tiles (backward_query_tile=128, d64); kTileMajor: the grid's key tiles
// outermost (backward_order=tile-major). All three experimental: not yet run on a GPU.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda::flash3 {

template <class Element, int kHeadDim, bool kWideEpilogue = false, int kTileM = 64, bool kTileMajor = false>
void run_backward(const BackwardParams& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
