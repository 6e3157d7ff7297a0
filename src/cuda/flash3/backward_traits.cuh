// flash3's backward configuration per (dtype, head dim): tiles, the register split and the
// shared-memory layout, derived and checked here rather than at the launch site.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

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
//   dSᵀ        two buffers (the ring's stage picks one) of kTileN key rows × kTileM queries (one
//              slab), written by the consumers in the same swizzle and read (transposed) as A of
//              dQ = dS·K. Two, so that a tile's stores wait only for that tile's barrier: the dQ
//              products that read the buffer two tiles ago are done by the time every consumer
//              passed the previous tile's barrier — one barrier of the consumers a tile instead of
//              two (with one buffer, the second kept the next tile's stores off dQ's operand);
//   row stats  LSE·log2 e and D of the stage's kTileM queries (fp32), kStages of them, loaded with
//              Q and dO (read from global memory per element, they were 45% of the stall cycles:
//              ncu, H100, d64 and d128, N 4096).
// dQ = dS·K over all 128 keys (both consumers' dSᵀ), a 64 × 64 wgmma tile (32 registers): at d128
// consumer c takes columns 64c .. 64c + 63 of every tile; at d64 one consumer takes the whole tile,
// consumer 0 on even tiles and 1 on odd ones (kDqAlternating). Measured on the H100 (bf16 N 4096,
// one call, 2026-12-06): d64 5.37 -> 3.91 ms dense, 2.95 -> 2.28 causal against each consumer
// reducing its own 64 keys' partial tile (twice the float2 reductions) with one dSᵀ buffer; d128
// unchanged (3.28 / 3.29 ms). 128-query tiles at d64 spilled 176 bytes: Sᵀ and dPᵀ alone are
// then 128 registers.
// dQ's sums: each warp stores its 16 × 64 sums as they lie in its registers (eight float4 a lane,
// a warp's store 512 contiguous bytes: no bank conflicts) into 4 KiB of shared memory, and lane 0
// adds them with one bulk reduction (cp.reduce.async.bulk .add.f32, the TMA unit's reduce-add):
// no reduction instructions in the warps. The sums are kept in the tiles' fragment order, which
// the dQ conversion reads back (backward_kernel.cuh: add_dq_bulk, convert_dq_tiles_kernel) — the
// way cuDNN's backward adds its dQ (ncu, H100: bulk reductions, no red instructions). Measured on
// the H100 (bf16, one call, 2026-12-06) against float2 reductions by row pairs (two sectors a
// request): d128 N 4096 2.93 -> 2.58 ms dense, 1.72 -> 1.53 causal; d64 3.71 -> 3.48, 2.19 ->
// 2.06; N 16384 1.06-1.12x; and against red.v4.f32 from a swizzled staging area (four sectors a
// request): 1.04-1.12x.
// 128-query tiles (backward_query_tile=128, d64 only; experimental: not yet run on a GPU): the
// tile of FlashAttention-3's d64 backward (128 × 128). Each consumer takes dQ's 64 queries of its
// own (query slab = consumer) over all keys, every tile, and dSᵀ = Pᵀ∘(dPᵀ − D) reads P from its
// 16-bit fragments (the A operand of dV's product) rather than the fp32 scores, so that Sᵀ's 64
// registers are free before dPᵀ's are read (with both, 124 bytes spilled: ptxas sm_90a, CUDA 13): P rounded to 16 bits
// before the product, as dS is after it.
// The register split is the forward's: 128·24 + 256·240 = 384·168 (__launch_bounds__(384, 1)).
// The grid's order (backward_order; tile-major experimental: not yet run on a GPU): head-major
// (x = key tile, y = kv head, z = batch) launches a head's key tiles together, so under a causal
// mask the last heads' longest CTAs start in the last wave; tile-major (x = kv head, y = batch,
// z = key tile) launches every head's first key tile first — the longest CTAs first across the
// grid. A list schedule of the CTAs' query tiles on 132 SMs (d128, N 4096, 64 (batch, head)s,
// causal) ends 6% earlier tile-major (546 against 580 tile-times; the ideal 543).
template <class Element_, int kHeadDim_, int kTileM_, bool kWideEpilogue_ = false, bool kTileMajor_ = false>
struct BackwardTraits : hopper::WarpSpecialized<2, 24, 240> {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kTileN = 128;
  static constexpr int kTileM = kTileM_;
  static constexpr int kStages = 2;
  // backward_epilogue=16-byte (experimental: not yet run on a GPU): dK and dV stored 16 bytes a
  // lane after a transpose within each quad (common/backward_epilogue.cuh) instead of 4.
  static constexpr bool kWideEpilogue = kWideEpilogue_;
  static constexpr bool kTileMajor = kTileMajor_;

  static constexpr int kKeysPerConsumer = kTileN / kConsumers;  // 64: one wgmma M

  static constexpr int kSlabs = kHeadDim / 64;
  static constexpr int kSlabRowBytes = 128;
  static constexpr int kKVSlabBytes = kTileN * kSlabRowBytes;
  static constexpr int kKVBytes = kSlabs * kKVSlabBytes;
  static constexpr int kQSlabBytes = kTileM * kSlabRowBytes;
  static constexpr int kQBytes = kSlabs * kQSlabBytes;  // one Q (or dO) tile
  static constexpr int kDsSlabs = kTileM / 64;
  static constexpr int kDsSlabBytes = kTileN * kSlabRowBytes;
  static constexpr int kDsBufferBytes = kDsSlabs * kDsSlabBytes;  // one of kStages
  // dQ's tile by one consumer in turn over all keys (d64, 64-query tiles), or by both, split by
  // columns (d128) or by queries (128-query tiles).
  static constexpr bool kDqAlternating = kHeadDim == 64 && kTileM == 64;
  static constexpr bool kDqByQueries = kTileM == 128;
  // dSᵀ from P's 16-bit fragments (128-query tiles: the registers of Sᵀ are free before dPᵀ's wait).
  static constexpr bool kScoreGradientsFromFragments = kTileM == 128;

  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + kKVBytes;
  static constexpr int kQOffset = kVOffset + kKVBytes;
  static constexpr int kDOOffset = kQOffset + kStages * kQBytes;
  static constexpr int kDsOffset = kDOOffset + kStages * kQBytes;
  static constexpr int kStatsBytes = 2 * kTileM * 4;  // one stage: LSE·log2 e, then D
  static constexpr int kStatsOffset = kDsOffset + kStages * kDsBufferBytes;
  // dQ's staging: a consumer's 4 warps × 16 rows × 64 fp32 columns.
  static constexpr int kDqStageWarpBytes = 16 * 64 * 4;
  static constexpr int kDqStageOffset = kStatsOffset + kStages * kStatsBytes;
  static constexpr int kDqStageBytes = kConsumers * 4 * kDqStageWarpBytes;
  static constexpr int kBarrierOffset = kDqStageOffset + kDqStageBytes;
  // A warp's staging rows: consumer, then warp.
  static constexpr __host__ __device__ std::uint32_t dq_staging_offset(int consumer, int warp) {
    return static_cast<std::uint32_t>(kDqStageOffset + (consumer * 4 + warp) * kDqStageWarpBytes);
  }
  // Barriers: K/V full, Q/dO full ×stages, Q/dO empty ×stages (8 bytes each).
  static constexpr int kBarrierBytes = 8 * (1 + 2 * kStages);
  // +1024: the dynamic shared memory's start is rounded up to the 128B swizzle's period.
  static constexpr int kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;

  static_assert(sizeof(Element) == 2, "flash3's backward computes on 16-bit inputs (fp16, bf16)");
  static_assert((kHeadDim == 64 || kHeadDim == 128) && (kTileM == 64 || (kTileM == 128 && kHeadDim == 64)),
                "dQ's tile is 64 × 64 wgmma tiles: one (d64), two by columns (d128) or two by queries (d64, "
                "128-query tiles)");
  static_assert(!kDqAlternating || kStages == kConsumers,
                "at d64 the ring's stage names the consumer that computes the tile's dQ");
  static_assert(kBackwardRowPadding % kTileM == 0, "the workspace's padded rows hold whole query tiles");
  static_assert(kKVSlabBytes % 1024 == 0 && kQSlabBytes % 1024 == 0 && kDsSlabBytes % 1024 == 0,
                "every slab starts on a 1024-byte swizzle period");
  static_assert(kTileM * 4 % 16 == 0 && kBackwardRowPadding * 4 % 16 == 0,
                "a tile's row statistics are one 16-byte-aligned bulk copy each");
  static_assert(kDqStageOffset % 16 == 0 && kDqStageWarpBytes % 16 == 0,
                "a bulk reduction reads 16-byte aligned shared memory");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// 64-query tiles: Sᵀ and dPᵀ 32 + 32 registers, dK and dV 32 + 32 (d64) or 64 + 64 (d128), dQ 32;
// shared memory 16 + 16 KiB K/V, 2 × (8 + 8) KiB Q/dO, 2 × 16 KiB dSᵀ, 1 KiB row statistics, 32 KiB
// dQ staging = 130 KiB at d64, 194 KiB at d128.
// 128-query tiles at d64 (kTileM = 128): Sᵀ and dPᵀ 64 + 64, dK and dV 32 + 32, dQ 32; shared
// memory 16 + 16 KiB K/V, 2 × (16 + 16) KiB Q/dO, 2 × 32 KiB dSᵀ, 2 KiB row statistics, 32 KiB dQ
// staging = 194 KiB.
template <class Element, int kHeadDim, bool kWideEpilogue = false, int kTileM = 64, bool kTileMajor = false>
struct BackwardConfig {
  using Kernel = BackwardTraits<Element, kHeadDim, kTileM, kWideEpilogue, kTileMajor>;
};

}  // namespace attnsuite::cuda::flash3
