// The PTX instructions sage adds to flash2's (cuda/flash2/primitives.cuh): the INT8 and FP8
// m16n8k32 MMAs and the float → e4m3 pair conversion. The FP8 ones exist on sm_89 and later;
// compiled for an older architecture they trap (sage2's supports() refuses such a build).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/flash2/primitives.cuh"

namespace attnsuite::cuda::sage {

using flash2::commit_async_copies;
using flash2::copy_16_bytes_async;
using flash2::exp2_approx;
using flash2::load_matrix_x4;
using flash2::load_matrix_x4_transposed;
using flash2::pack_pair;
using flash2::quad_max;
using flash2::quad_sum;
using flash2::shared_address;
using flash2::wait_async_copies;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define ATTNSUITE_SAGE_HAVE_FP8_MMA 1
#else
#define ATTNSUITE_SAGE_HAVE_FP8_MMA 0
#endif

// acc (16×8 s32) += A (16×32 s8, row) · B (32×8 s8, col).
__device__ __forceinline__ void mma_s8_16x8x32(int (&acc)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                               std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(acc[0]), "+r"(acc[1]), "+r"(acc[2]), "+r"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d (16×8 f32) = A (16×32 e4m3, row) · B (32×8 e4m3, col), into a fresh accumulator: the
// first level of sage2's two-level accumulation.
__device__ __forceinline__ void mma_e4m3_16x8x32_fresh(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                                       std::uint32_t b1) {
#if ATTNSUITE_SAGE_HAVE_FP8_MMA
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
#else
  d[0] = d[1] = d[2] = d[3] = 0.0f;
  __trap();
#endif
}
// acc (16×8 f32) += A · B, e4m3.
__device__ __forceinline__ void mma_e4m3_16x8x32(float (&acc)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                                 std::uint32_t b1) {
#if ATTNSUITE_SAGE_HAVE_FP8_MMA
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// Two floats → two e4m3 bytes (round to nearest even, saturating), `low` in the low byte.
__device__ __forceinline__ std::uint32_t pack_e4m3_pair(float low, float high) {
  return static_cast<std::uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(low, high), __NV_SATFINITE, __NV_E4M3));
}

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

}  // namespace attnsuite::cuda::sage
