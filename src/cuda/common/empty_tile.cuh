// The output of a query tile that no row of sees a key (causal or windowed past the keys, an
// empty block-sparse list): shared by the fused kernels of every architecture.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace attnsuite::cuda {

// O = 0 and LSE = -inf for the tile's rows [row_begin, row_begin + kTileM) below seq_q, written
// by the CTA's kThreads threads (`thread`: this one's index) in 16-byte chunks of O's rows
// (kHeadDim 16-bit elements). The caller reads threadIdx.x: as the first instruction of its
// branch, the compiler shares that read with the kernel's other branch.
template <int kTileM, int kHeadDim, int kThreads, class Element, class Params>
__device__ __forceinline__ void write_empty_tile(int thread, const Params& params, Element* o_head, float* lse_head,
                                                 int row_begin) {
  constexpr int kChunks = kHeadDim / 8;
  for (int index = thread; index < kTileM * kChunks; index += kThreads) {
    const int row = index / kChunks, chunk = index % kChunks;
    if (row_begin + row < params.seq_q) {
      *reinterpret_cast<uint4*>(o_head + (row_begin + row) * params.o_row_stride + chunk * 8) = make_uint4(0, 0, 0, 0);
    }
  }
  if (lse_head != nullptr) {
    for (int row = thread; row < kTileM; row += kThreads)
      if (row_begin + row < params.seq_q) lse_head[row_begin + row] = -INFINITY;
  }
}

}  // namespace attnsuite::cuda
