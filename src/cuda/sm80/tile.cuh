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
  // The addresses with every step moved by `steps`, known only at run time (a warp's column
  // group): FragmentAddresses(r, c, s).at(t, row16, j) == FragmentAddresses(r, c).at(t, row16,
  // s + j), the offsets computed, not selected: `at` with a run-time step would index lane_offset
  // dynamically and put it in local memory (flash2's backward: LDL per dQ tile, ncu's "local
  // memory spilling" 46% of its L1 requests on the H100).
  __device__ __forceinline__ FragmentAddresses(int lane_row, int lane_chunk, int steps) {
    static_assert(kOffsets == 4, "rows of 128 bytes or more: a step's offset repeats every 4 steps");
#pragma unroll
    for (int j = 0; j < kOffsets; ++j) {
      const int step = steps + j;
      lane_offset[j] = static_cast<std::uint32_t>(
          swizzled_byte_offset<kRowBytes>(lane_row, 2 * (step % 4) + lane_chunk) + (step / 4) * 128);
    }
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

// The warp's Q fragments (A of Q·Kᵀ) of its first kQRegisterTiles row tiles, kept in registers
// for the whole CTA, from the Q tile at q_address (landed: the caller waits for its copies).
template <int kQRegisterTiles, int kKSteps, int kTiles, int kSteps, class QAddresses>
__device__ __forceinline__ void load_q_fragments(std::uint32_t (&q_frag)[kTiles][kSteps][4],
                                                 const QAddresses& q_addresses, std::uint32_t q_address) {
#pragma unroll
  for (int mt = 0; mt < kQRegisterTiles; ++mt)
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) load_matrix_x4(q_frag[mt][ks], q_addresses.at(q_address, mt, ks));
}

// The Q fragments a warp keeps in registers for the whole CTA: its first kQRegisterTiles row
// tiles (one unused entry when it keeps none).
template <int kQRegisterTiles, int kKSteps>
using QFragments = std::uint32_t[kQRegisterTiles > 0 ? kQRegisterTiles : 1][kQRegisterTiles > 0 ? kKSteps : 1][4];

// The forward's Q fragments (load_q_fragments), once the Q tile has landed: the caller committed
// Q's copies, then kPendingCopies more groups (the K/V prologue). Keeping none: nothing to do.
template <int kQRegisterTiles, int kKSteps, int kPendingCopies, class QAddresses>
__device__ __forceinline__ void keep_q_fragments(QFragments<kQRegisterTiles, kKSteps>& q_frag,
                                                 const QAddresses& q_addresses, std::uint32_t q_address) {
  if constexpr (kQRegisterTiles > 0) {
    wait_async_copies<kPendingCopies>();
    __syncthreads();
    load_q_fragments<kQRegisterTiles, kKSteps>(q_frag, q_addresses, q_address);
  }
}

// Every entry of a warp's m16n8 accumulators set to 0.
template <class Acc, int kMTiles, int kTiles>
__device__ __forceinline__ void clear_accumulators(Acc (&acc)[kMTiles][kTiles][4]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][t][e] = Acc(0);
}

// A warp's rows before the first K tile: O = 0, running max -inf, running sum 0 (per fragment row
// (mt, half): half 0 is row quad_row, half 1 is row quad_row + 8).
template <int kMTiles, int kDTiles>
__device__ __forceinline__ void start_rows(float (&acc_o)[kMTiles][kDTiles][4], float (&row_max)[kMTiles][2],
                                           float (&row_sum)[kMTiles][2]) {
  clear_accumulators(acc_o);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_max[mt][half] = -INFINITY;
      row_sum[mt][half] = 0.0f;
    }
}

// The two 8-column B fragments of one ldmatrix.x4, b (b[0..1], b[2..3]), times each row tile's A
// fragment: acc[mt][2·j] += a[mt] · (b[0], b[1]), acc[mt][2·j + 1] += a[mt] · (b[2], b[3]), by one
// m16n8 MMA each (mma(acc, a, b0, b1)).
template <class Acc, int kMTiles, int kTiles, class Mma>
__device__ __forceinline__ void multiply_b_pair(Acc (&acc)[kMTiles][kTiles][4], int j,
                                                const std::uint32_t (&a)[kMTiles][4], const std::uint32_t (&b)[4],
                                                Mma mma) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    mma(acc[mt][2 * j], a[mt], b[0], b[1]);
    mma(acc[mt][2 * j + 1], a[mt], b[2], b[3]);
  }
}

// acc = Q·Kᵀ of a warp's kMTiles 16-row tiles and a K tile (kNTiles 8-key tiles), kKSteps k-steps
// of one m16n8 MMA each (mma(acc, a, b0, b1)): A from the Q fragments the warp keeps in registers
// (its first kQRegisterTiles row tiles, q_frag) or ldmatrix'd at q_address; B from the K tile at
// k_tile, two 8-key tiles per ldmatrix.x4.
template <int kQRegisterTiles, int kKSteps, class Acc, int kMTiles, int kNTiles, class QFragments, class QAddresses,
          class KAddresses, class Mma>
__device__ __forceinline__ void multiply_qk(Acc (&acc)[kMTiles][kNTiles][4], const QFragments& q_frag,
                                            const QAddresses& q_addresses, std::uint32_t q_address,
                                            const KAddresses& k_addresses, std::uint32_t k_tile, Mma mma) {
  clear_accumulators(acc);
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    std::uint32_t a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if (mt < kQRegisterTiles) {  // resolved at compile time (mt is unrolled)
#pragma unroll
        for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt < kQRegisterTiles ? mt : 0][ks][e];
      } else {
        load_matrix_x4(a[mt], q_addresses.at(q_address, mt, ks));
      }
    }
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      std::uint32_t b[4];
      load_matrix_x4(b, k_addresses.at(k_tile, np, ks));
      multiply_b_pair(acc, np, a, b, mma);
    }
  }
}

// O += P·V with P rounded to the 16-bit Element: S's accumulator layout for key tiles 2j, 2j+1 is
// the A fragment of k-step j; V's rows (keys) read transposed at v_tile (ldmatrix .trans).
template <class Element, int kMTiles, int kNTiles, int kDTiles, class VAddresses>
__device__ __forceinline__ void accumulate_pv(float (&acc_o)[kMTiles][kDTiles][4], float (&acc_s)[kMTiles][kNTiles][4],
                                              const VAddresses& v_addresses, std::uint32_t v_tile) {
#pragma unroll
  for (int kk = 0; kk < kNTiles / 2; ++kk) {
    std::uint32_t p[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      p[mt][0] = pack_pair<Element>(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
      p[mt][1] = pack_pair<Element>(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
      p[mt][2] = pack_pair<Element>(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
      p[mt][3] = pack_pair<Element>(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      std::uint32_t b[4];
      load_matrix_x4_transposed(b, v_addresses.at(v_tile, kk, dp));
      multiply_b_pair(acc_o, dp, p, b, Mma16x8x16<Element>{});
    }
  }
}

}  // namespace attnsuite::cuda::sm80
