// flash3's backward configuration per (dtype, head dim): tiles, the register split and the
// shared-memory layout, derived and checked here rather than at the launch site.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/backward_rows.hpp"
#include "cuda/hopper/register_split.hpp"

namespace attnsuite::cuda::flash3 {

// One CTA owns kTileN = 128 keys of one (batch, kv head): warpgroup 0 is the producer (one thread
// issues every TMA copy: K and V once, then Q and dO tiles of kTileM query rows through a
// kStages-deep ring), warpgroups 1 and 2 the consumers, 64 keys each (one wgmma M = 64 tile),
// whose dK and dV stay in registers over every query tile of every q head of the group.
//
// Shared memory, every tile in 64-column slabs of 128-byte rows with TMA's 128B swizzle:
//   K, V       kTileN rows, kHeadDim / 64 slabs each (once);
//   Q, dO      kTileM rows, kHeadDim / 64 slabs, kStages of each;
//   dSᵀ        kTileN key rows × kTileM queries (one slab), written by the consumers in the same
//              swizzle and read (transposed) as A of dQ = dS·K;
//   row stats  LSE·log2 e and D of the stage's kTileM queries (fp32), kStages of them, loaded with
//              Q and dO (read from global memory per element, they were 45% of the stall cycles:
//              ncu, H100, d64 and d128, N 4096).
// dQ = dS·K, a 64 × 64 wgmma tile (32 registers) per consumer: at d128 consumer c takes columns
// 64c .. 64c + 63 over all 128 keys (both consumers' dSᵀ, a barrier of the two); at d64 each
// takes the whole 64 × 64 tile over its own 64 keys and both add into the fp32 sums (twice the
// atomics, no barrier between the consumers). 128-query tiles at d64 (one dQ tile each) spilled
// 176 bytes: Sᵀ and dPᵀ alone are then 128 registers.
//
// kBulkDq (backend option backward_dq=bulk): dQ's tile goes through a shared-memory staging tile
// per consumer (64 rows of 64 fp32, rows padded to 288 bytes so a warp's float2 stores take two
// wavefronts) and one TMA bulk reduce-add per row into the fp32 sums, instead of 32 float2
// reductions per thread — FlashAttention-3's choice.
// kDsBuffers (backend option backward_ds_buffers=2; experimental: not yet run on a GPU): dSᵀ
// double-buffered, so a query tile's stores wait only for the previous tile's barrier (the dQ
// products of two tiles ago have read that buffer by then): one barrier of the consumers a tile
// instead of two. At d64 the tile's dQ is then computed by one consumer over all 128 keys,
// consumer it % 2 on iteration it (kDqAlternating): half the dQ reductions of kDqOverOwnKeys.
// The register split is the forward's: 128·24 + 256·240 = 384·168 (__launch_bounds__(384, 1)).
template <class Element_, int kHeadDim_, int kTileM_, bool kBulkDq_ = false, int kDsBuffers_ = 1>
struct BackwardTraits : hopper::WarpSpecialized<2, 24, 240> {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kTileN = 128;
  static constexpr int kTileM = kTileM_;
  static constexpr int kStages = 2;

  static constexpr int kKeysPerConsumer = kTileN / kConsumers;  // 64: one wgmma M

  static constexpr int kSlabs = kHeadDim / 64;
  static constexpr int kSlabRowBytes = 128;
  static constexpr int kKVSlabBytes = kTileN * kSlabRowBytes;
  static constexpr int kKVBytes = kSlabs * kKVSlabBytes;
  static constexpr int kQSlabBytes = kTileM * kSlabRowBytes;
  static constexpr int kQBytes = kSlabs * kQSlabBytes;  // one Q (or dO) tile
  static constexpr int kDsSlabs = kTileM / 64;
  static constexpr int kDsSlabBytes = kTileN * kSlabRowBytes;
  static constexpr int kDsBuffers = kDsBuffers_;
  // dQ over the consumer's own keys (d64, one dSᵀ buffer), over all keys by one consumer a tile
  // in turn (d64, two buffers), or over all keys split by columns (d128).
  static constexpr bool kDqOverOwnKeys = kHeadDim == 64 && kDsBuffers == 1;
  static constexpr bool kDqAlternating = kHeadDim == 64 && kDsBuffers == 2;

  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + kKVBytes;
  static constexpr int kQOffset = kVOffset + kKVBytes;
  static constexpr int kDOOffset = kQOffset + kStages * kQBytes;
  static constexpr int kDsOffset = kDOOffset + kStages * kQBytes;
  static constexpr int kStatsBytes = 2 * kTileM * 4;  // one stage: LSE·log2 e, then D
  static constexpr int kDsBufferBytes = kDsSlabs * kDsSlabBytes;
  static constexpr int kStatsOffset = kDsOffset + kDsBuffers * kDsBufferBytes;
  static constexpr bool kBulkDq = kBulkDq_;
  static constexpr int kDqRowBytes = 64 * 4 + 32;
  static constexpr int kDqStageBytes = kTileM * kDqRowBytes;  // one consumer's
  static constexpr int kDqStageOffset = kStatsOffset + kStages * kStatsBytes;
  static constexpr int kBarrierOffset = kDqStageOffset + (kBulkDq ? kConsumers * kDqStageBytes : 0);
  // Barriers: K/V full, Q/dO full ×stages, Q/dO empty ×stages (8 bytes each).
  static constexpr int kBarrierBytes = 8 * (1 + 2 * kStages);
  // +1024: the dynamic shared memory's start is rounded up to the 128B swizzle's period.
  static constexpr int kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;

  static_assert(sizeof(Element) == 2, "flash3's backward computes on 16-bit inputs (fp16, bf16)");
  static_assert((kHeadDim == 64 || kHeadDim == 128) && kTileM == 64,
                "dQ's 64-query tile is one 64 × 64 wgmma tile (d64) or two (d128) per consumer");
  static_assert(kDsBuffers == 1 || kDsBuffers == 2, "dSᵀ has one buffer or two");
  static_assert(kBackwardRowPadding % kTileM == 0, "the workspace's padded rows hold whole query tiles");
  static_assert(kKVSlabBytes % 1024 == 0 && kQSlabBytes % 1024 == 0 && kDsSlabBytes % 1024 == 0,
                "every slab starts on a 1024-byte swizzle period");
  static_assert(kTileM * 4 % 16 == 0 && kBackwardRowPadding * 4 % 16 == 0,
                "a tile's row statistics are one 16-byte-aligned bulk copy each");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// 64-query tiles: Sᵀ and dPᵀ 32 + 32 registers, dK and dV 32 + 32 (d64) or 64 + 64 (d128), dQ 32;
// shared memory 16 + 16 KiB K/V, 2 × (8 + 8) KiB Q/dO, 16 KiB dSᵀ, 1 KiB row statistics = 82 KiB at
// d64, 146 KiB at d128.
// kBulkDq: + 2 × 18 KiB dQ staging tiles; kDsBuffers = 2: + 16 KiB.
template <class Element, int kHeadDim, bool kBulkDq = false, int kDsBuffers = 1>
struct BackwardConfig {
  using Kernel = BackwardTraits<Element, kHeadDim, 64, kBulkDq, kDsBuffers>;
};

}  // namespace attnsuite::cuda::flash3
