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
// Query tiles: 128 rows at d64 (FlashAttention-3's d64 tile, 128 × 128), 64 at d128 (dK and dV
// are 64 + 64 registers there). dQ = dS·K over all 128 keys (both consumers' dSᵀ) in 64 × 64
// wgmma tiles (32 registers): at d64 consumer c takes queries 64c .. 64c + 63 of every tile, at
// d128 columns 64c .. 64c + 63. At d64, dSᵀ = Pᵀ∘(dPᵀ − D) reads P from its 16-bit fragments (the
// A operand of dV's product) rather than the fp32 scores, so that Sᵀ's 64 registers are free
// before dPᵀ's are read (with the fp32 scores 124 bytes spilled, ptxas sm_90a, CUDA 13): P is
// rounded to 16 bits before the product, as dS is after it (rel-L1 of the gradients 2.9e-3
// against 2.3e-3). Measured on the H100 (bf16, one call, 2026-12-06; history, "Backward v6")
// against 64-query tiles with dQ's tile by one consumer in turn: N 4096 3.51 -> 3.07 ms dense,
// 2.07 -> 1.84 causal; the grid's key tiles outermost (every head's longest causal CTA first,
// predicted 6% shorter by a list schedule) was 1.5-1.9x slower: a head's key tiles launched
// together share its Q and dO in L2.
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
// The register split is the forward's: 128·24 + 256·240 = 384·168 (__launch_bounds__(384, 1)).
// The grid's order: grouped (kHeadGroup = 4, the default with each head dim's default epilogue)
// interleaves the key tiles of kHeadGroup heads (x = key tile · kHeadGroup + head in the group,
// y = head group, z = batch), so a group's longest causal CTAs start first while the CTAs in
// flight still share a few heads' Q and dO in L2; head-major (kHeadGroup = 1, backward_order=
// head-major and the other epilogues: x = key tile, y = kv head) launches a head's key tiles in a
// row, so the last heads' longest CTAs start in the last wave. Measured on the H100 (bf16 N 4096,
// three runs each, 2026-12-07): causal d128 1.41-1.43 ms against 1.47-1.49, d64 1.79-1.81 against
// 1.82-1.84; dense and causal N 16384 within noise (a list schedule had predicted 6% and 3%).
// Every head's key tiles outermost was 1.5-1.9x slower (L2: 2026-12-06g); persistent CTAs walking
// the head-major order, the next unit's K and V loaded under the dK/dV stores, were no faster dense
// and 1.11-1.59x slower causal (2026-12-07).
template <class Element_, int kHeadDim_, int kTileM_, bool kWideEpilogue_ = false, int kHeadGroup_ = 1>
struct BackwardTraits : hopper::WarpSpecialized<2, 24, 240> {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kTileN = 128;
  static constexpr int kTileM = kTileM_;
  static constexpr int kStages = 2;
  // dK and dV stored 16 bytes a lane after a transpose within each quad (common/backward_epilogue.cuh)
  // instead of 4: d128's default (H100, bf16 N 4096: 2.60 -> 2.60 ms dense, 1.53 -> 1.49 causal);
  // at d64 with 128-query tiles opt-in (backward_epilogue=16-byte; correct on the H100, its speed
  // not yet measured).
  static constexpr bool kWideEpilogue = kWideEpilogue_;
  static constexpr int kHeadGroup = kHeadGroup_;

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
  // dQ's tile split between the consumers by queries (128-query tiles) or by columns (d128).
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
  static_assert((kHeadDim == 64 && kTileM == 128) || (kHeadDim == 128 && kTileM == 64),
                "dQ's tile is two 64 × 64 wgmma tiles: by queries (d64, 128-query tiles) or by columns (d128)");
  static_assert(kBackwardRowPadding % kTileM == 0, "the workspace's padded rows hold whole query tiles");
  static_assert(kKVSlabBytes % 1024 == 0 && kQSlabBytes % 1024 == 0 && kDsSlabBytes % 1024 == 0,
                "every slab starts on a 1024-byte swizzle period");
  static_assert(kTileM * 4 % 16 == 0 && kBackwardRowPadding * 4 % 16 == 0,
                "a tile's row statistics are one 16-byte-aligned bulk copy each");
  static_assert(kDqStageOffset % 16 == 0 && kDqStageWarpBytes % 16 == 0,
                "a bulk reduction reads 16-byte aligned shared memory");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// d64, 128-query tiles: Sᵀ and dPᵀ 64 + 64 registers, dK and dV 32 + 32, dQ 32; shared memory 16 +
// 16 KiB K/V, 2 × (16 + 16) KiB Q/dO, 2 × 32 KiB dSᵀ, 2 KiB row statistics, 32 KiB dQ staging =
// 194 KiB. d128, 64-query tiles: Sᵀ and dPᵀ 32 + 32, dK and dV 64 + 64, dQ 32; 32 + 32 KiB K/V,
// 2 × (16 + 16) KiB Q/dO, 2 × 16 KiB dSᵀ, 1 KiB row statistics, 32 KiB dQ staging = 194 KiB.
template <class Element, int kHeadDim, bool kWideEpilogue, int kHeadGroup = 1>
struct BackwardConfig {
  using Kernel = BackwardTraits<Element, kHeadDim, kHeadDim == 64 ? 128 : 64, kWideEpilogue, kHeadGroup>;
};

}  // namespace attnsuite::cuda::flash3
