// Shared-memory tiles of the mma.sync kernels: the XOR swizzle that keeps ldmatrix free of bank
// conflicts, ldmatrix row addresses without per-load arithmetic, and cp.async tile loads.
#pragma once

#include <cstdint>

#include "cuda/sm80/primitives.cuh"

namespace attnsuite::cuda::sm80 {

// 16-byte chunk `chunk` of row `row` of a shared tile with kRowBytes-byte rows, swizzled so that
// the 8 rows one ldmatrix 8×8 matrix reads (same chunk, 8 consecutive rows) fall in 8 different
// 16-byte bank groups: XOR the chunk with the row's index among the rows that share a 128-byte
// line set — rows of 128 bytes or more: row & 7 (flash2's swizzle); 64: (row / 2) & 3; 32:
// (row / 4) & 1. The phase repeats every 8 rows, so any tile offset by 8 rows keeps it.
template <int kRowBytes>
__host__ __device__ constexpr int swizzled_byte_offset(int row, int chunk) {
  constexpr int kChunks = kRowBytes / 16;
  static_assert(kChunks == 2 || kChunks == 4 || kChunks % 8 == 0, "rows of 32, 64 or a multiple of 128 bytes");
  const int phase = kChunks >= 8 ? (row & 7) : (kChunks == 4 ? ((row >> 1) & 3) : ((row >> 2) & 1));
  return row * kRowBytes + ((chunk ^ phase) << 4);
}

// ldmatrix row addresses of a lane (flash2's FragmentAddresses for any row width): fragment
// (row16, step) reads chunks 2·step + lane_chunk of rows 16·row16 + lane_row; the swizzle only
// touches a chunk's low 3 bits, so 4 per-lane offsets (step % 4) and constants address all.
template <int kRowBytes>
struct FragmentAddresses {
  static constexpr int kOffsets = kRowBytes / 32 < 4 ? kRowBytes / 32 : 4;
  std::uint32_t lane_offset[kOffsets];
  __device__ __forceinline__ FragmentAddresses(int lane_row, int lane_chunk) {
#pragma unroll
    for (int j = 0; j < kOffsets; ++j)
      lane_offset[j] = static_cast<std::uint32_t>(swizzled_byte_offset<kRowBytes>(lane_row, 2 * j + lane_chunk));
  }
  __device__ __forceinline__ std::uint32_t at(std::uint32_t tile_address, int row16, int step) const {
    return tile_address + lane_offset[step % kOffsets] +
           static_cast<std::uint32_t>(row16 * 16 * kRowBytes + (step / 4) * 128);
  }
};

// Issues the cp.async copies of kRows rows of kRowBytes bytes (row `i` at rows + i·row_stride
// bytes) into a swizzled tile; rows >= valid_rows are zero-filled and read nothing.
template <int kRows, int kRowBytes, int kThreads>
__device__ __forceinline__ void load_rows_async(std::uint32_t tile_address, const char* rows, std::int64_t row_stride,
                                                int valid_rows, const void* safe_address) {
  constexpr int kChunks = kRowBytes / 16;
  constexpr int kPerThread = kRows * kChunks / kThreads;
  static_assert(kPerThread * kThreads == kRows * kChunks, "tile loads divide evenly among the threads");
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int index = i * kThreads + static_cast<int>(threadIdx.x);
    const int row = index / kChunks, chunk = index % kChunks;
    const bool valid = row < valid_rows;
    const void* src = valid ? static_cast<const void*>(rows + row * row_stride + chunk * 16) : safe_address;
    copy_16_bytes_async(tile_address + swizzled_byte_offset<kRowBytes>(row, chunk), src, valid);
  }
}

}  // namespace attnsuite::cuda::sm80
