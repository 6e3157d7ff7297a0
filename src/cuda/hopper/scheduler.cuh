// The tile schedulers of the Hopper kernels: which (query tile, q head, batch) a CTA works on, and
// the key tiles it visits.
#pragma once

#include <cstdint>

#include "cuda/common/key_range.cuh"
#include "cuda/hopper/work_order.hpp"

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
// different heads. flash3's m192 runs non-causal windows so (d64; and option forward_order=longest-first):
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

// Persistent CTAs over every problem, in units of equal causal cost: a unit is a head's query
// tiles q_tiles − 1 − p and p (the longest and the shortest left; the middle tile alone when
// q_tiles is odd, after every pair), so under a causal mask every unit visits about q_tiles + 1
// key tiles and the round-robin over units balances (a model of it: max/mean CTA cost
// 1.03-1.06 at B·N = 16384, as the longest-first bands) while the units in flight keep a head's
// K and V in L2: the grid has min(units, SMs) CTAs, and CTA b runs units b, b + gridDim.x, ...
// head-major (units of one head side by side: 132 CTAs work on about 132 / (q_tiles / 2) heads,
// where the longest-first bands spread them over ~132 heads). Why: the 128-row tiles longest
// first were 0.58-0.84x the grid at d128 causal N 512-4096 (H100), and ncu there measured the
// grid reading each head's K/V about once from DRAM (1.30 TB/s over 203 µs at N 1024, the bytes
// of Q, K, V and O once) — the bands read them once per query tile (ncu: L2 hit rate 34% against
// paired's 69%, 259 against 182 µs; H100, docs/results/h100/2026-12-07c/). flash3's causal
// problems run so (m192 at d64, the default tiles at d128 and d256), and flash3-fp8's with
// forward_order=persistent (one CTA a unit there, uncapped: flash3/flash3_fp8.cpp).
// A unit's works are a loop of one or two turns, not unrolled, so that `work` — the consumer's
// and the producer's whole per-work code — is compiled once: called for a pair's two tiles and
// for a middle tile apart, the kernel held it three times (d128: 9,904 SASS instructions against
// 3,464, sm_90a, CUDA 13.0), and at causal d128 N 1024 its warps stalled on the instruction cache
// in 10.5% of ncu's samples against cuDNN's 1.7% (H100, docs/results/h100/2026-12-07e/). Compiled
// once it was 1.01-1.10x as fast at causal N 512-4096, most at d128 N 512 (0.1268 against 0.1395
// ms; H100, docs/results/h100/2026-12-07f/).
struct PersistentPairedSchedule {
  static constexpr bool kPersistent = true;
  template <class Tile, class Params, class Work>
  __device__ __forceinline__ static void for_each_work(const Params& params, Work work) {
    const int heads_batch = params.heads_q * params.batch;
    const int pairs_per_head = params.q_tiles / 2;
    const int paired = heads_batch * pairs_per_head;  // the units that are pairs; then the middle tiles
    const int all = static_cast<int>(paired_units(params.q_tiles, heads_batch));
    for (int u = static_cast<int>(blockIdx.x); u < all; u += static_cast<int>(gridDim.x)) {
      const bool pair = u < paired;
      const int head_batch = pair ? u / pairs_per_head : u - paired;
      const int p = pair ? u % pairs_per_head : pairs_per_head;  // the middle tile: pairs_per_head
      const int head = head_batch % params.heads_q, batch = head_batch / params.heads_q;
#pragma unroll 1
      for (int turn = 0; turn < (pair ? 2 : 1); ++turn)
        work(Tile(params, pair && turn == 0 ? params.q_tiles - 1 - p : p, head, batch));
    }
  }
};

}  // namespace attnsuite::cuda::hopper
