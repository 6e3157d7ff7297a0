// The online softmax of the mma.sync kernels (flash2, sage) over one K tile of a warp's scores,
// in the m16n8 accumulator layout: acc_s[mt][nt][2·half + e] is row mt·16 + quad_row + 8·half of
// the warp's rows, key nt·8 + 2·quad_col + e of the tile.
#pragma once

#include "cuda/common/key_range.cuh"
#include "cuda/sm80/primitives.cuh"

namespace attnsuite::cuda::sm80 {

// Scores of keys outside their row's range (key_range) → -inf; the warp's first row is
// row_begin + warp_row, the tile's first key key_begin.
template <int kMTiles, int kNTiles, class Params>
__device__ __forceinline__ void mask_scores(const Params& params, float (&acc_s)[kMTiles][kNTiles][4], int key_begin,
                                            int row_begin, int warp_row, int quad_row, int quad_col) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const KeyRange keys = key_range(params, row_begin + warp_row + mt * 16 + quad_row + 8 * half);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key_begin + nt * 8 + 2 * quad_col + e;
          if (key < keys.begin || key >= keys.end) acc_s[mt][nt][2 * half + e] = -INFINITY;
        }
    }
}

// P = 2^(S·scale − max·scale) in place, the rows' running max and sum updated, and O rescaled by
// 2^((old max − new max)·scale): scale = scale_log2() (flash2: softmax scale · log2 e; a callable,
// read where used: as a value the compiler ordered the operands of the multiplies otherwise), or,
// kLog2Units, none: S is in log2 units already (sage). Always rescaled: skipping it when no max changed (a warp-uniform
// branch) measured 3–7% slower on the H200 (docs/kernels/flash2.md, v3). on_row_max(tile max, new max) sees each row's
// maxima (flash2's block-sparse P·V skip).
template <bool kLog2Units, int kMTiles, int kNTiles, int kDTiles, class ScaleLog2, class OnRowMax>
__device__ __forceinline__ void online_softmax(float (&acc_s)[kMTiles][kNTiles][4], float (&acc_o)[kMTiles][kDTiles][4],
                                               float (&row_max)[kMTiles][2], float (&row_sum)[kMTiles][2],
                                               ScaleLog2 scale_log2, OnRowMax on_row_max) {
  float correction[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
        tile_max = fmaxf(tile_max, fmaxf(acc_s[mt][nt][2 * half], acc_s[mt][nt][2 * half + 1]));
      const float row_tile_max = quad_max(tile_max);
      const float new_max = fmaxf(row_max[mt][half], row_tile_max);
      on_row_max(row_tile_max, new_max);
      // A row that has seen no key yet keeps max -inf; subtracting 0 then keeps its p at 0
      // (2^-inf) instead of NaN (-inf − -inf).
      float max_scaled, old_max_scaled;
      if constexpr (kLog2Units) {
        max_scaled = new_max == -INFINITY ? 0.0f : new_max;
        old_max_scaled = row_max[mt][half];
      } else {
        max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2();
        old_max_scaled = row_max[mt][half] * scale_log2();
      }
      correction[mt][half] = exp2_approx(old_max_scaled - max_scaled);
      row_max[mt][half] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float p;
          if constexpr (kLog2Units) {
            p = exp2_approx(acc_s[mt][nt][2 * half + e] - max_scaled);
          } else {
            p = exp2_approx(fmaf(acc_s[mt][nt][2 * half + e], scale_log2(), -max_scaled));
          }
          acc_s[mt][nt][2 * half + e] = p;
          sum += p;
        }
      row_sum[mt][half] = row_sum[mt][half] * correction[mt][half] + sum;
    }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] *= correction[mt][e / 2];
}

}  // namespace attnsuite::cuda::sm80
