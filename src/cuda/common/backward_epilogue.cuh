// The end of flash2's and flash3's backward main kernels (device code): a thread's dK and dV,
// kept in registers over every query tile, to global memory.
#pragma once

#include <cstdint>

#include "cuda/common/backward_row_kernels.cuh"
#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda {

// dK (times the scale) and dV of a thread's two keys, first_key and first_key + 8 (none past
// seq_kv), 4 bytes per store: columns 8i + 2·quad_col and the next of each, read from the
// thread's accumulators as dk_at(i, e) and dv_at(i, e) with e = 2·half and 2·half + 1 (the mma
// and wgmma accumulator layouts differ only in how (i, e) index them).
template <class Element, int kHeadDim, class DkAt, class DvAt>
__device__ __forceinline__ void store_key_gradients(const BackwardParams& params, int first_key, int kv_head, int batch,
                                                    int quad_col, DkAt dk_at, DvAt dv_at) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = first_key + 8 * half;
    if (key >= params.seq_kv) continue;
    auto* dk = static_cast<Element*>(params.dk) + batch * params.dk_batch_stride +
               static_cast<std::int64_t>(key) * params.dk_row_stride + kv_head * params.dk_head_stride + 2 * quad_col;
    auto* dv = static_cast<Element*>(params.dv) + batch * params.dv_batch_stride +
               static_cast<std::int64_t>(key) * params.dv_row_stride + kv_head * params.dv_head_stride + 2 * quad_col;
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i) {
      *reinterpret_cast<std::uint32_t*>(dk + 8 * i) =
          pack_row_pair<Element>(dk_at(i, 2 * half) * params.scale, dk_at(i, 2 * half + 1) * params.scale);
      *reinterpret_cast<std::uint32_t*>(dv + 8 * i) =
          pack_row_pair<Element>(dv_at(i, 2 * half), dv_at(i, 2 * half + 1));
    }
  }
}

}  // namespace attnsuite::cuda
