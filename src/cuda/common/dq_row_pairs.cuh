// dQ's fp32 sums of a backward, added by row pairs (device code only; flash3's backward, and
// flash2's under backward_dq=row-pairs).
//
// Both kernels hold dQ in m16-row accumulator fragments: lane (quad_row, quad_col) has the pairs
// of rows quad_row and quad_row + 8 at columns 8i + 2·quad_col. Each thread adding its own pairs
// makes a warp's float2 reduction cover 8 columns (32 bytes) of each of 8 rows: one 32-byte
// sector a request to L2. Here the lanes of two quad rows (l and l ^ 4) swap half their pairs
// first (one float2 shuffle a 16-column block), so that one warp reduction covers 16 columns (64
// bytes) of each of 4 rows: two sectors a request. ncu (H100, flash3 d128 N 4096): one-sector
// requests, 134 M of them, against cuDNN's 67 M two-sector ones, with the crossbar into L2 75%
// busy; by row pairs flash3 ran 1.10–1.12× faster at d128, 1.04–1.05× at d64 (2026-12-06).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace attnsuite::cuda {

// One float2 into two adjacent fp32 sums (8-byte aligned): sm_90's vector reduction, else two.
__device__ __forceinline__ void add_pair(float* sums, float2 value) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(sums), value);
#else
  atomicAdd(sums, value.x);
  atomicAdd(sums + 1, value.y);
#endif
}

// kBlocks 16-column blocks; `sums`: the fp32 sums at row (quad_row & ~1) of the 16, column
// 8·(quad_row & 1) + 2·quad_col of the first block; `pair(i, half)`: this lane's float2 at columns
// 8i + 2·quad_col of row quad_row + 8·half.
template <int kBlocks, class Pair>
__device__ __forceinline__ void add_by_row_pairs(float* sums, std::int64_t row_stride, int quad_row, Pair pair) {
  const int odd = quad_row & 1;
#pragma unroll
  for (int block = 0; block < kBlocks; ++block)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // This lane's pairs at columns 16·block + 2·quad_col (i = 2·block) and + 8 (i = 2·block + 1).
      const float2 first = pair(2 * block, half);
      const float2 second = pair(2 * block + 1, half);
      // The even lane hands its second pair (the odd lane writes it into the even row), the odd lane
      // its first (the even lane writes it into the odd row).
      const float2 sent = odd ? first : second;
      const float2 got = make_float2(__shfl_xor_sync(0xffffffffu, sent.x, 4), __shfl_xor_sync(0xffffffffu, sent.y, 4));
      float* row_sums = sums + 8 * half * row_stride + 16 * block;
      add_pair(row_sums, odd ? got : first);                // the even row
      add_pair(row_sums + row_stride, odd ? second : got);  // the odd row
    }
}

}  // namespace attnsuite::cuda
