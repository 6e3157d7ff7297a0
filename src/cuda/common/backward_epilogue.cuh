// The end of flash2's and flash3's backward main kernels (device code): a thread's dK and dV,
// kept in registers over every query tile, to global memory.
#pragma once

#include <cstdint>

#include "cuda/common/backward_row_kernels.cuh"
#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda {

// dK (times the scale) and dV of a thread's two keys, first_key and first_key + 8 (none past
// seq_kv), 4 bytes per store: kColumns / 8 column pairs, columns column_offset + 8i + 2·quad_col
// and the next, read from the thread's accumulators as dk_at(i, e) and dv_at(i, e) with e = 2·half
// and 2·half + 1 (the mma and wgmma accumulator layouts differ only in how (i, e) index them).
template <class Element, int kColumns, class DkAt, class DvAt>
__device__ __forceinline__ void store_key_gradient_columns(const BackwardParams& params, int first_key, int kv_head,
                                                           int batch, int column_offset, int quad_col, DkAt dk_at,
                                                           DvAt dv_at) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = first_key + 8 * half;
    if (key >= params.seq_kv) continue;
    auto* dk = static_cast<Element*>(params.dk) + batch * params.dk_batch_stride +
               static_cast<std::int64_t>(key) * params.dk_row_stride + kv_head * params.dk_head_stride + column_offset +
               2 * quad_col;
    auto* dv = static_cast<Element*>(params.dv) + batch * params.dv_batch_stride +
               static_cast<std::int64_t>(key) * params.dv_row_stride + kv_head * params.dv_head_stride + column_offset +
               2 * quad_col;
#pragma unroll
    for (int i = 0; i < kColumns / 8; ++i) {
      *reinterpret_cast<std::uint32_t*>(dk + 8 * i) =
          pack_row_pair<Element>(dk_at(i, 2 * half) * params.scale, dk_at(i, 2 * half + 1) * params.scale);
      *reinterpret_cast<std::uint32_t*>(dv + 8 * i) =
          pack_row_pair<Element>(dv_at(i, 2 * half), dv_at(i, 2 * half + 1));
    }
  }
}

// Every column of the two keys: columns 8i + 2·quad_col and the next.
template <class Element, int kHeadDim, class DkAt, class DvAt>
__device__ __forceinline__ void store_key_gradients(const BackwardParams& params, int first_key, int kv_head, int batch,
                                                    int quad_col, DkAt dk_at, DvAt dv_at) {
  store_key_gradient_columns<Element, kHeadDim>(params, first_key, kv_head, batch, 0, quad_col, dk_at, dv_at);
}

// A 4 × 4 transpose of 32-bit values across the lanes of a quad (lanes 4q .. 4q + 3): afterwards
// values[b] of lane quad_col is what lane b held in values[quad_col]. Two butterfly stages with
// static indices (a run-time index would put the array in local memory); every lane of the warp
// takes part.
__device__ __forceinline__ void transpose_in_quad(std::uint32_t (&values)[4], int quad_col) {
#pragma unroll
  for (int mask = 1; mask <= 2; mask *= 2)
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      if (a & mask) continue;
      const bool high = (quad_col & mask) != 0;
      const std::uint32_t got = __shfl_xor_sync(0xffffffffu, high ? values[a] : values[a | mask], mask);
      if (high)
        values[a] = got;
      else
        values[a | mask] = got;
    }
}

// store_key_gradients with 16-byte stores (flash3's at d128, and backward_epilogue=16-byte; H100,
// bf16 N 4096: 1.00x dense, 1.03x causal the 4-byte stores at d128): the four lanes of a quad hold
// the 4-byte column pairs of 8-column block i; transposed over four blocks at a time, lane quad_col
// stores block 4j + quad_col whole, so a warp's store covers 64 contiguous bytes of each of its 8
// rows (two full sectors) instead of 16 (half a sector), with a quarter of the store instructions.
// dK's and dV's rows must be 16-byte aligned.
template <class Element, int kHeadDim, class DkAt, class DvAt>
__device__ __forceinline__ void store_key_gradients_16_bytes(const BackwardParams& params, int first_key, int kv_head,
                                                             int batch, int quad_col, DkAt dk_at, DvAt dv_at) {
  static_assert(kHeadDim % 32 == 0, "four 8-column blocks at a time");
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = first_key + 8 * half;
    const bool inside = key < params.seq_kv;  // the quad shares its key; every lane shuffles
    auto* dk = static_cast<Element*>(params.dk) + batch * params.dk_batch_stride +
               static_cast<std::int64_t>(key) * params.dk_row_stride + kv_head * params.dk_head_stride;
    auto* dv = static_cast<Element*>(params.dv) + batch * params.dv_batch_stride +
               static_cast<std::int64_t>(key) * params.dv_row_stride + kv_head * params.dv_head_stride;
#pragma unroll
    for (int j = 0; j < kHeadDim / 32; ++j) {
      std::uint32_t dk_pairs[4], dv_pairs[4];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        dk_pairs[b] = pack_row_pair<Element>(dk_at(4 * j + b, 2 * half) * params.scale,
                                             dk_at(4 * j + b, 2 * half + 1) * params.scale);
        dv_pairs[b] = pack_row_pair<Element>(dv_at(4 * j + b, 2 * half), dv_at(4 * j + b, 2 * half + 1));
      }
      transpose_in_quad(dk_pairs, quad_col);
      transpose_in_quad(dv_pairs, quad_col);
      if (inside) {
        const int column = 8 * (4 * j + quad_col);
        *reinterpret_cast<uint4*>(dk + column) = make_uint4(dk_pairs[0], dk_pairs[1], dk_pairs[2], dk_pairs[3]);
        *reinterpret_cast<uint4*>(dv + column) = make_uint4(dv_pairs[0], dv_pairs[1], dv_pairs[2], dv_pairs[3]);
      }
    }
  }
}

}  // namespace attnsuite::cuda
