// The tile schedulers of the Hopper kernels: which (query tile, q head, batch) a CTA works on, and
// the key tiles it visits.
#pragma once

#include <cstdint>

#include "cuda/common/key_range.cuh"

namespace attnsuite::cuda::hopper {

// One work: kTileM query rows of one (q head, batch) and the key tiles some row of them sees
// (causal / window early exit), or, block-sparse (Params::block_index, 128 × 128 tiles only:
// kTakesBlockList), the kept ones of the tile's list. Every thread reads the same list entry (a
// broadcast load, L1-resident after the first).
template <int kTileM, int kTileN_, bool kTakesBlockList>
struct WorkTile {
  static constexpr int kTileN = kTileN_;
  int m_block = 0, head = 0, batch = 0, kv_head = 0, row_begin = 0;
  KeyRange first_row_keys, last_row_keys;
  int n_block_min = 0;
  int tiles = 0;              // key tiles visited; <= 0: no row of the tile sees a key
  const int* kept = nullptr;  // block-sparse: the visited tiles; null: n_block_min + visit

  template <class Params>
  __device__ __forceinline__ WorkTile(const Params& params, int m_block_, int head_, int batch_)
      : m_block(m_block_), head(head_), batch(batch_) {
    kv_head = head / params.group_size;
    row_begin = m_block * kTileM;
    const int row_last = min(row_begin + kTileM, params.seq_q) - 1;
    // Keys any row of this tile sees: [first row's begin, last row's end). Rows are monotone.
    first_row_keys = key_range(params, row_begin);
    last_row_keys = key_range(params, row_last);
    n_block_min = first_row_keys.begin / kTileN;
    const int n_block_max = (last_row_keys.end + kTileN - 1) / kTileN;
    tiles = n_block_max - n_block_min;
    if (kTakesBlockList && params.block_index != nullptr) {
      const std::int64_t slot = (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.m_blocks + m_block;
      kept = params.block_index + slot * params.n_blocks;
      tiles = params.block_count[slot];
    }
    if (n_block_max <= n_block_min || last_row_keys.end <= first_row_keys.begin) tiles = 0;
  }
  // The key tile of visit `visit` (0 .. tiles - 1).
  __device__ __forceinline__ int block(int visit) const {
    return kept != nullptr ? __ldg(kept + visit) : n_block_min + visit;
  }
  // Key tiles inside every row's range need no element mask: [last row's begin, first row's end).
  __device__ __forceinline__ bool masked(int n_block) const {
    const int key_begin = n_block * kTileN;
    return key_begin < last_row_keys.begin || key_begin + kTileN > first_row_keys.end;
  }
};

// One work per CTA, the grid (query tiles, q heads, batch): heavy (late, causal) query tiles get
// the low block indices, so the short ones fill the tail of the grid.
struct GridSchedule {
  static constexpr bool kPersistent = false;
  template <class Tile, class Params, class Work>
  __device__ __forceinline__ static void for_each_work(const Params& params, Work work) {
    work(Tile(params, static_cast<int>(gridDim.x - 1 - blockIdx.x), static_cast<int>(blockIdx.y),
              static_cast<int>(blockIdx.z)));
  }
};

// Persistent CTAs: the grid has min(works, SMs) CTAs and CTA b runs works b, b + gridDim.x, ...
// Work w has query tile q_tiles − 1 − w % q_tiles (the heavy, late causal tiles of a head first),
// head and batch from w / q_tiles: consecutive works share a head's K and V (read from L2 by the
// CTAs that run them at the same time). The static round-robin balances works of equal cost only:
// the host runs masked (causal, windowed) problems one CTA per work, where the hardware hands
// the next CTA to whichever SM is free (measured on the H200: persistent causal d128 N 16k 1.49x
// slower; a model of the round-robin gives 1.57x max/mean work per CTA there). Next: take works
// from a global atomic counter (docs/kernels/flash3.md; a first try hung: it raised the
// producer's setmaxnreg beyond the launch's register pool, register_split.hpp).
struct PersistentSchedule {
  static constexpr bool kPersistent = true;
  template <class Tile, class Params, class Work>
  __device__ __forceinline__ static void for_each_work(const Params& params, Work work) {
    for (int w = static_cast<int>(blockIdx.x); w < params.works; w += static_cast<int>(gridDim.x)) {
      const int head_batch = w / params.q_tiles;
      work(Tile(params, params.q_tiles - 1 - w % params.q_tiles, head_batch % params.heads_q,
                head_batch / params.heads_q));
    }
  }
};

// Persistent CTAs over every problem, masked or not: the grid has min(works, SMs) CTAs and CTA b
// runs works b, b + gridDim.x, ... with work w's query tile q_tiles − 1 − w / (heads · batch)
// and head and batch from w % (heads · batch): under a causal mask the works come in bands of
// equal cost, the longest first, so the round-robin hands every CTA about the same cost (a
// longest-first list schedule) — at the price of K/V sharing: the CTAs in flight work on ~132
// different heads. flash3's m192 runs masked problems so (d64; and option forward_order=longest-first):
// cuDNN's forward runs one persistent CTA per SM at causal N 1024 and was 1.30x faster there than
// flash3's one CTA per work (ncu, H100, docs/results/h100/2026-12-07/); m192 so is 1.02-1.19x its
// grid at causal N 512-4096, 1.22-1.24x with a 256-key window, but the 128-row tiles at d128
// 0.58-0.84x theirs (H100, docs/results/h100/2026-12-07b/).
struct PersistentLongestFirstSchedule {
  static constexpr bool kPersistent = true;
  template <class Tile, class Params, class Work>
  __device__ __forceinline__ static void for_each_work(const Params& params, Work work) {
    const int heads_batch = params.heads_q * params.batch;
    for (int w = static_cast<int>(blockIdx.x); w < params.works; w += static_cast<int>(gridDim.x)) {
      const int head_batch = w % heads_batch;
      work(
          Tile(params, params.q_tiles - 1 - w / heads_batch, head_batch % params.heads_q, head_batch / params.heads_q));
    }
  }
};

}  // namespace attnsuite::cuda::hopper
