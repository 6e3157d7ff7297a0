// The compile-time configuration of sage's Hopper kernels (wgmma_kernel.cuh) per (mode, dtype,
// head dim): tiles, pipeline depth, register split and the shared-memory layout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/hopper/register_split.hpp"
#include "cuda/sage/params.hpp"
#include "cuda/sage/quant_rule.hpp"

namespace attnsuite::cuda::sage::wgmma {

// flash3's CTA: kTileM = 128 query rows of one (batch, q head), warpgroup 0 the producer (one
// thread issues every TMA copy), warpgroups 1 and 2 the consumers, 64 rows each (one wgmma
// M = 64 tile). K/V tiles of kTileN = 128 keys stream through a kStages-deep ring.
//   Q8, K8: INT8 rows of head_dim bytes as TMA writes them, swizzled over the whole row (128B
//           at d128, 64B at d64) — flash3-fp8's 8-bit layout, read K-major by wgmma s8;
//   V (sage): the caller's 16-bit V, flash3's 64-column slabs (128B swizzle), read transposed
//           by the 16-bit RS wgmma;
//   Vᵀ8 (sage2): the quantizer's FP8 Vᵀ, head_dim rows of 128 keys (128 bytes, 128B swizzle),
//           keys permuted per 16 (v_key_position) — flash3-fp8's Vᵀ layout, loaded by TMA
//           directly (flash3-fp8 transposes in the producer; our quantizer writes it so).
// kSchedule (params.hpp): kPingPong — the two consumers take turns at the tensor cores
// (wgmma_kernel.cuh), so that one's softmax overlaps the other's GEMMs (else each consumer's
// GEMMs and softmax follow each other and the two run unsynchronized: flash3's v1 schedule);
// kOverlap — also, inside a consumer, the softmax of tile j runs while P_{j-1}·V_{j-1} executes.
// kFmaExp2Every_ > 0 (sage2's "wgmma-pingpong-fmaexp"): every kFmaExp2Every-th 8-key group of
// scores takes its exponentials on the FMA pipe (softmax_exp2, hopper/primitives.cuh).
// flash3's split: __launch_bounds__(384, 1) → 168 per thread; the producer only issues TMA.
template <Mode kMode_, class Element_, int kHeadDim_, int kStages_, Schedule kSchedule_, int kFmaExp2Every_ = 0>
struct Traits : hopper::WarpSpecialized<2, 24, 240> {
  static constexpr Mode kMode = kMode_;
  static constexpr Schedule kSchedule = kSchedule_;
  static constexpr int kFmaExp2Every = kFmaExp2Every_;
  static constexpr bool kPingPong = kSchedule != Schedule::Serial;
  static constexpr bool kOverlap = kSchedule == Schedule::Overlap;
  using Element = Element_;  // the 16-bit dtype of O (and of V for sage)
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kTileM = 128;
  static constexpr int kTileN = 128;
  static constexpr int kStages = kStages_;

  static constexpr int kRowsPerConsumer = kTileM / kConsumers;

  static constexpr int kQBlockRows = q_block_rows(kMode);
  // K scales per thread and tile: sage, one per kKBlockRows-key block; sage2, one (its key group).
  static constexpr int kKBlockRows = k_block_rows(kMode, kHeadDim);
  static constexpr int kKScales = k_key_groups(kMode) ? 1 : kTileN / kKBlockRows;

  // INT8 Q and K: one box per tile, rows of head_dim bytes.
  static constexpr int kRowBytes = kHeadDim;
  static constexpr int kSwizzleBytes = kHeadDim;
  static constexpr int kSwizzlePeriod = 8 * kRowBytes;  // 8 rows: wgmma's SBO for K-major
  static constexpr int kQBytes = kTileM * kRowBytes;
  static constexpr int kKBytes = kTileN * kRowBytes;
  // sage: 16-bit V in 64-column slabs of kTileN rows × 128 bytes; sage2: Vᵀ8, head_dim rows × 128 B.
  static constexpr int kVSlabs = kHeadDim / 64;
  static constexpr int kVSlabBytes = kTileN * 128;
  static constexpr int kVBytes = kMode == Mode::Sage ? kVSlabs * kVSlabBytes : kHeadDim * kTileN;

  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKBytes;
  static constexpr int kBarrierOffset = kVOffset + kStages * kVBytes;
  // Barriers: Q full, K full ×stages, V full ×stages, K/V empty ×stages.
  static constexpr int kBarrierBytes = 8 * (1 + 3 * kStages);
  static constexpr int kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;  // +1024: base rounded up

  static_assert(sizeof(Element) == 2, "O (and sage's V) are 16-bit (fp16, bf16)");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "an INT8 Q/K row is one swizzle span: 64 or 128 bytes");
  static_assert(kTileM % kQBlockRows == 0 && (kQBlockRows == 1 || kQBlockRows == kTileM),
                "a Q scale block is one row or the whole CTA tile: one scale per accumulator row");
  static_assert(k_key_groups(kMode) ? kTileN == kKGroupTileKeys : kKBlockRows % 8 == 0 && kTileN % kKBlockRows == 0,
                "a K scale block is whole 8-key accumulator column groups and divides the tile; a key tile "
                "is one tile of key groups (one K scale per thread)");
  static_assert(kQBytes % 1024 == 0 && kKBytes % 1024 == 0 && kVBytes % 1024 == 0 && kVSlabBytes % 1024 == 0,
                "every tile starts on a 1024-byte swizzle period");
  static_assert(kStages >= 2, "at least double-buffered K/V");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
  static_assert(127 * 127 * kHeadDim < (1 << 22), "INT8 dot products must stay below 2^22 (int_to_float trick)");
};

// Shared memory: sage d128 16 + 3 × (16 + 32) = 160 KiB; sage d64 8 + 4 × (8 + 16) = 104 KiB;
// sage2 d128 16 + 4 × (16 + 16) = 144 KiB; sage2 d64 8 + 4 × (8 + 8) = 72 KiB. One CTA per SM
// (384 threads, 240 registers per consumer thread): the deeper ring lets the producer run ahead.
template <Mode kMode, class Element, int kHeadDim, Schedule kSchedule, int kFmaExp2Every = 0>
struct Config {
  using Kernel =
      Traits<kMode, Element, kHeadDim, (kMode == Mode::Sage && kHeadDim == 128) ? 3 : 4, kSchedule, kFmaExp2Every>;
};

}  // namespace attnsuite::cuda::sage::wgmma
