// flash2's fused forward kernel (device code only): FlashAttention-2's algorithm on mma.sync.
//
// Per CTA: kTileM query rows of one (batch, q head). Q is loaded once (cp.async → swizzled
// shared memory, then ldmatrix into registers for the first kQRegisterTiles row tiles of each
// warp, the others re-read per K tile); K/V tiles
// of kTileN keys stream through a kStages-deep cp.async ring; per tile, S = Q·Kᵀ (fp32), the
// online softmax (running row max and sum, exp2 with the scale folded into log2(e)), P rounded
// to the input dtype, O += P·V (fp32). Only the
// tiles a row range can see are visited (causal / window early exit); the element mask is
// applied only to tiles that cross a mask boundary or the end of the keys.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/empty_tile.cuh"
#include "cuda/common/key_range.cuh"
#include "cuda/flash2/params.hpp"
#include "cuda/sm80/primitives.cuh"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile.cuh"

namespace attnsuite::cuda::flash2 {

using namespace sm80;  // the mma.sync PTX wrappers (sm80/primitives.cuh)

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows][kHeadDim] shared tile.
// XOR-ing the chunk with the row's low 3 bits puts the 8 rows that one ldmatrix 8×8 matrix
// reads (same chunk, 8 consecutive rows) into 8 different bank groups: conflict-free.
template <int kHeadDim>
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  return row * kHeadDim + ((chunk ^ (row & 7)) << 3);
}

// ldmatrix row addresses without per-load index arithmetic. A lane's 8×8-matrix row is always
// `lane_row` (+ multiples of 8 rows) and its chunk `2·step + lane_chunk`; with the XOR swizzle
// the chunk lands at 8·(step / 4) + ((2·(step % 4)) ^ (lane_chunk ^ (lane_row & 7))). So four
// per-lane offsets (one per step % 4) plus compile-time constants address every fragment, and
// the loads become [register + immediate] instead of keeping one address register per load.
template <int kHeadDim>
struct FragmentAddresses {
  std::uint32_t lane_offset[4];  // bytes, for step % 4 = 0..3
  __device__ __forceinline__ FragmentAddresses(int lane_row, int lane_chunk) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int chunk = (2 * j) ^ (lane_chunk ^ (lane_row & 7));
      lane_offset[j] = static_cast<std::uint32_t>((lane_row * kHeadDim + chunk * 8) * 2);
    }
  }
  // Byte address of the fragment at row block `row16` (16 rows each) and k-step `step`.
  __device__ __forceinline__ std::uint32_t at(std::uint32_t tile_address, int row16, int step) const {
    return tile_address + lane_offset[step % 4] +
           static_cast<std::uint32_t>((row16 * 16 * kHeadDim + (step / 4) * 64) * 2);
  }
};

// Issues the cp.async copies of a [kRows][kHeadDim] tile whose first row is `rows` (row
// stride in elements). Rows >= valid_rows are zero-filled and read nothing. (Per-thread 32-bit
// row offsets instead of 64-bit addresses per copy moved the spills around without removing
// them: 16–24 B on d64/d128, 84 B instead of 140 B on 128×64 d128; not adopted.)
template <class Traits, int kRows>
__device__ __forceinline__ void load_tile_async(typename Traits::Element* tile, const typename Traits::Element* rows,
                                                std::int64_t row_stride, int valid_rows,
                                                const typename Traits::Element* safe_address) {
  constexpr int kChunks = Traits::kChunksPerRow;
  constexpr int kPerThread = kRows * kChunks / Traits::kThreads;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int index = i * Traits::kThreads + static_cast<int>(threadIdx.x);
    const int row = index / kChunks, chunk = index % kChunks;
    const bool valid = row < valid_rows;
    const auto* src = valid ? rows + row * row_stride + chunk * 8 : safe_address;
    copy_16_bytes_async(shared_address(tile + swizzled_offset<Traits::kHeadDim>(row, chunk)), src, valid);
  }
}

// The whole forward of one CTA; the dense and the block-sparse kernel below are this body with
// their own Params (BlockSparse<Traits> adds the kept-block lists and the P·V skip).
template <class Traits, class KernelParams>
__device__ __forceinline__ void forward_body(const KernelParams& params) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kTileM = Traits::kTileM, kTileN = Traits::kTileN;
  constexpr int kStages = Traits::kStages;
  constexpr int kMTiles = Traits::kMTiles, kNTiles = Traits::kNTiles, kDTiles = Traits::kDTiles;
  constexpr int kKSteps = Traits::kKSteps, kRowsPerWarp = Traits::kRowsPerWarp;
  constexpr int kChunks = Traits::kChunksPerRow;

  extern __shared__ __align__(128) unsigned char shared_bytes[];
  Element* smem_q = reinterpret_cast<Element*>(shared_bytes);
  Element* smem_k = smem_q + Traits::kQTileElements;
  Element* smem_v = smem_k + kStages * Traits::kKVTileElements;

  // Heavy (late, causal) row tiles first, so the short ones fill the tail of the grid.
  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int kv_head = head / params.group_size;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int quad_row = lane / 4, quad_col = lane % 4;  // mma fragment coordinates
  const int row_begin = m_block * kTileM;
  const int row_last = min(row_begin + kTileM, params.seq_q) - 1;

  const auto* q_head =
      static_cast<const Element*>(params.q) + batch * params.q_batch_stride + head * params.q_head_stride;
  const auto* k_head =
      static_cast<const Element*>(params.k) + batch * params.k_batch_stride + kv_head * params.k_head_stride;
  const auto* v_head =
      static_cast<const Element*>(params.v) + batch * params.v_batch_stride + kv_head * params.v_head_stride;
  auto* o_head = static_cast<Element*>(params.o) + batch * params.o_batch_stride + head * params.o_head_stride;
  float* lse_head = params.lse != nullptr
                        ? params.lse + (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.seq_q
                        : nullptr;

  // Keys any row of this tile sees: [first row's begin, last row's end). Rows are monotone.
  const KeyRange first_row_keys = key_range(params, row_begin);
  const KeyRange last_row_keys = key_range(params, row_last);
  const int n_block_min = first_row_keys.begin / kTileN;
  const int n_block_max = (last_row_keys.end + kTileN - 1) / kTileN;
  // Iterations [it_begin, it_end) visit key block block_at(it): every block of the range when
  // dense, the q block's kept list when block-sparse.
  [[maybe_unused]] const int* kept = nullptr;
  [[maybe_unused]] int kept_count = 0;
  if constexpr (Traits::kBlockSparse) {
    const std::int64_t slot = (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.m_blocks + m_block;
    kept = params.block_index + slot * params.n_blocks;
    kept_count = params.block_count[slot];
  }
  const int it_begin = Traits::kBlockSparse ? 0 : n_block_min;
  const int it_end = Traits::kBlockSparse ? kept_count : n_block_max;
  auto block_at = [&](int it) {
    if constexpr (Traits::kBlockSparse) {
      return kept[it];
    } else {
      return it;
    }
  };

  if (n_block_max <= n_block_min || last_row_keys.end <= first_row_keys.begin ||
      (Traits::kBlockSparse && it_end <= it_begin)) {
    // No row of the tile sees a key: O = 0, LSE = -inf.
    write_empty_tile<kTileM, kHeadDim, Traits::kThreads>(static_cast<int>(threadIdx.x), params, o_head, lse_head,
                                                         row_begin);
    return;
  }
  // Tiles fully inside every row's range need no element mask.
  const int unmasked_key_begin = last_row_keys.begin;
  const int unmasked_key_end = first_row_keys.end;

  auto load_kv_tile = [&](int it) {
    const int stage = (it - it_begin) % kStages;
    const int key_begin = block_at(it) * kTileN;
    load_tile_async<Traits, kTileN>(smem_k + stage * Traits::kKVTileElements, k_head + key_begin * params.k_row_stride,
                                    params.k_row_stride, params.seq_kv - key_begin, k_head);
    load_tile_async<Traits, kTileN>(smem_v + stage * Traits::kKVTileElements, v_head + key_begin * params.v_row_stride,
                                    params.v_row_stride, params.seq_kv - key_begin, v_head);
  };

  // Prologue: Q, then the first kStages - 1 K/V tiles, one commit group each.
  load_tile_async<Traits, kTileM>(smem_q, q_head + row_begin * params.q_row_stride, params.q_row_stride,
                                  params.seq_q - row_begin, q_head);
  commit_async_copies();
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (it_begin + stage < it_end) load_kv_tile(it_begin + stage);
    commit_async_copies();
  }

  const int warp_row = warp * kRowsPerWarp;  // first row of this warp within the tile
  // ldmatrix row addresses: for A (Q) lanes 0-15 give rows 0-15 of chunk 2k, 16-31 of chunk
  // 2k+1; for B (K) lanes 0-7/8-15 give keys 0-7 of chunks 2k/2k+1, lanes 16-31 keys 8-15;
  // for Vᵀ (transposed loads) lanes 0-15 give keys 0-15 of chunk 2d, lanes 16-31 of chunk 2d+1.
  const int a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_chunk = lane / 16;
  const int b_row = (lane % 8) + 8 * (lane / 16), b_chunk = (lane / 8) % 2;
  // Q and Vᵀ use the same lane pattern, and the warp's first Q row is a multiple of 8, so its
  // swizzle phase is the same too: one set of lane offsets serves both (4 registers fewer).
  const FragmentAddresses<kHeadDim> a_addresses(a_row, a_chunk);
  const FragmentAddresses<kHeadDim> k_addresses(b_row, b_chunk);
  const std::uint32_t smem_q_address = shared_address(smem_q) + warp_row * kHeadDim * 2;
  const std::uint32_t smem_k_address = shared_address(smem_k);
  const std::uint32_t smem_v_address = shared_address(smem_v);
  constexpr std::uint32_t kKVTileBytes = Traits::kKVTileElements * 2;

  constexpr int kQRegisterTiles = Traits::kQRegisterTiles;
  QFragments<kQRegisterTiles, kKSteps> q_frag;
  keep_q_fragments<kQRegisterTiles, kKSteps, kStages - 1>(q_frag, a_addresses, smem_q_address);

  float acc_o[kMTiles][kDTiles][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];
  start_rows(acc_o, row_max, row_sum);

  // The three phases of one K/V tile, over the tile's S accumulator. (Holding two of them to
  // issue Q·Kᵀ of tile n+1 before the softmax of tile n ran 20–30% slower: register pressure.)
  using ScoreTile = float[kMTiles][kNTiles][4];

  // S = Q·Kᵀ for this warp's rows and the tile's kTileN keys (unscaled, fp32).
  auto compute_scores = [&](int it, ScoreTile& acc_s) {
    const int stage = (it - it_begin) % kStages;
    multiply_qk<kQRegisterTiles, kKSteps>(acc_s, q_frag, a_addresses, smem_q_address, k_addresses,
                                          smem_k_address + stage * kKVTileBytes, Mma16x8x16<Element>{});
  };

  // Block-sparse only: this warp's P·V skip threshold, and whether the current block's P is
  // negligible for all of its rows (set by softmax, read by the loop).
  [[maybe_unused]] float pv_limit_log2 = 0.0f;
  [[maybe_unused]] bool pv_negligible = true;
  [[maybe_unused]] unsigned pv_skipped = 0;
  if constexpr (Traits::kBlockSparse) pv_limit_log2 = params.pv_threshold_log2[head];

  // Mask (boundary tiles only), then the online softmax (sm80/softmax.cuh).
  auto softmax = [&](int n_block, ScoreTile& acc_s) {
    const int key_begin = n_block * kTileN;
    if (key_begin < unmasked_key_begin || key_begin + kTileN > unmasked_key_end)
      mask_scores(params, acc_s, key_begin, row_begin, warp_row, quad_row, quad_col);
    // Block-sparse: P·V of this block may be skipped only if every row of the warp has it far
    // below its running max: all p < 2^-λ·log2e relative to the row's largest.
    const auto skip_check = [&](float row_tile_max, float new_max) {
      if constexpr (Traits::kBlockSparse) {
        if (!((row_tile_max - new_max) * params.scale_log2 < -pv_limit_log2)) pv_negligible = false;
      }
    };
    online_softmax<false>(
        acc_s, acc_o, row_max, row_sum, [&] { return params.scale_log2; }, skip_check);
  };

  // O += P·V (V transposed: the same lane pattern as Q).
  auto accumulate_pv = [&](int it, ScoreTile& acc_s) {
    const int stage = (it - it_begin) % kStages;
    sm80::accumulate_pv<Element>(acc_o, acc_s, a_addresses, smem_v_address + stage * kKVTileBytes);
  };

  ScoreTile acc_s;
  for (int it = it_begin; it < it_end; ++it) {
    wait_async_copies<kStages - 2>();
    __syncthreads();  // tile `it` visible to all; the stage computed last iteration is free
    if (it + kStages - 1 < it_end) load_kv_tile(it + kStages - 1);
    commit_async_copies();
    compute_scores(it, acc_s);
    if constexpr (Traits::kBlockSparse) pv_negligible = true;
    softmax(block_at(it), acc_s);
    if constexpr (Traits::kBlockSparse) {
      if (__all_sync(0xffffffffu, pv_negligible)) {  // warp-uniform: no divergence
        ++pv_skipped;
        continue;
      }
    }
    accumulate_pv(it, acc_s);
  }
  wait_async_copies<0>();  // only empty groups can be left; keep the count clean
  if constexpr (Traits::kBlockSparse) {
    if (params.pv_skips != nullptr && lane == 0 && pv_skipped > 0) atomicAdd(params.pv_skips, pv_skipped);
  }

  // Epilogue: O /= row sum, LSE = max·scale + ln(sum); rows that saw no key: O = 0, LSE = -inf.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // sum == 0 only where the row saw no key: O = 0 even where V holds NaN/Inf (P·V gave
      // 0·NaN there). A NaN sum (NaN or +Inf in the row's scores) propagates to O and the LSE.
      const float sum = quad_sum(row_sum[mt][half]);
      const bool seen = sum != 0.0f;
      const float inverse = 1.0f / sum;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        acc_o[mt][dt][2 * half] = seen ? acc_o[mt][dt][2 * half] * inverse : 0.0f;
        acc_o[mt][dt][2 * half + 1] = seen ? acc_o[mt][dt][2 * half + 1] * inverse : 0.0f;
      }
      const int row = row_begin + warp_row + mt * 16 + quad_row + 8 * half;
      if (lse_head != nullptr && quad_col == 0 && row < params.seq_q) {
        lse_head[row] = seen ? row_max[mt][half] * params.scale + logf(sum) : -INFINITY;
      }
    }

  // Stage this warp's O rows through its own rows of the Q tile (only this warp ever read
  // them), then store 16-byte chunks: full rows are contiguous runs in global memory.
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row + mt * 16 + quad_row + 8 * half;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        *reinterpret_cast<std::uint32_t*>(smem_q + swizzled_offset<kHeadDim>(row, dt) + 2 * quad_col) =
            pack_pair<Element>(acc_o[mt][dt][2 * half], acc_o[mt][dt][2 * half + 1]);
      }
    }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kRowsPerWarp * kChunks / 32; ++i) {
    const int index = i * 32 + lane;
    const int row = warp_row + index / kChunks, chunk = index % kChunks;
    if (row_begin + row < params.seq_q) {
      *reinterpret_cast<uint4*>(o_head + (row_begin + row) * params.o_row_stride + chunk * 8) =
          *reinterpret_cast<const uint4*>(smem_q + swizzled_offset<kHeadDim>(row, chunk));
    }
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    flash2_forward_kernel(const __grid_constant__ Params params) {
  forward_body<Traits>(params);
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    flash2_block_sparse_kernel(const __grid_constant__ SparseParams params) {
  forward_body<Traits>(params);
}

}  // namespace attnsuite::cuda::flash2
