// The epilogue of a Hopper consumer thread: its two rows of O and their LSE, from the wgmma
// accumulator straight to global memory.
#pragma once

#include <cstdint>

#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::hopper {

// Rows c.thread_row + 8·half (half 0, 1) of the tile's (batch, head), those below seq_q: O entry
// (row, column 8i + 2·quad_col + e) = acc_o[4i + 2·half + e] · c.o_scale(c.o_factor(sum), i, e)
// with `sum` the row's over its quad; LSE (quad column 0, where params.lse is set) =
// c.lse(half, row, sum). sum == 0 only where the row saw no key (also every row of a work tile
// without keys: the state as constructed): O = 0 even where V holds NaN/Inf (P·V gave 0·NaN
// there), LSE = -inf. A NaN sum (NaN or +Inf among the row's scores) propagates to O and the LSE.
template <class Element, int kHeadDim, class Params, class Tile, class C>
__device__ __forceinline__ void store_rows(const Params& params, const Tile& tile, C& c) {
  auto* o_head =
      static_cast<Element*>(params.o) + tile.batch * params.o_batch_stride + tile.head * params.o_head_stride;
  float* lse_head =
      params.lse != nullptr
          ? params.lse + (static_cast<std::int64_t>(tile.batch) * params.heads_q + tile.head) * params.seq_q
          : nullptr;
  c.begin_epilogue();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = quad_sum(c.row_sum[half]);
    const bool seen = sum != 0.0f;
    const float factor = c.o_factor(sum);
    const int row = c.thread_row + 8 * half;
    if (row < params.seq_q) {
      if (lse_head != nullptr && c.quad_col == 0) lse_head[row] = seen ? c.lse(half, row, sum) : -INFINITY;
      Element* o_row = o_head + row * params.o_row_stride + 2 * c.quad_col;
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i) {
        const float low = seen ? c.acc_o[4 * i + 2 * half] * c.o_scale(factor, i, 0) : 0.0f;
        const float high = seen ? c.acc_o[4 * i + 2 * half + 1] * c.o_scale(factor, i, 1) : 0.0f;
        *reinterpret_cast<std::uint32_t*>(o_row + 8 * i) = pack_pair<Element>(low, high);
      }
    }
  }
}

}  // namespace attnsuite::cuda::hopper
