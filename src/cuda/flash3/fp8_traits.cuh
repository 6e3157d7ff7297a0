// flash3-fp8's compile-time configuration per head dim: tiles, pipeline depth, register split
// and the shared-memory layout (e4m3 Q, K, V as TMA loads them, plus the transposed V).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/hopper/register_split.hpp"
#include "cuda/hopper/work_order.hpp"

namespace attnsuite::cuda::flash3 {

// A CTA owns 128 query rows of one (batch, q head), as in flash3: warpgroup 0 produces (one
// thread issues the TMA copies; all four warps transpose V), warpgroups 1 and 2 consume 64 rows
// each. K/V tiles are 128 keys: one k32 step of P·V takes 32 keys, and a transposed V row of
// 128 keys is 128 bytes, exactly the 128B swizzle span.
// The producer transposes V, so it keeps more than flash3's 24 registers (16 loaded words, 16
// permuted ones, addresses): 128·56 + 256·224 = 64512 <= 65536 (launch bound 168/thread).
// kPersistent_ false: one CTA per work (GridSchedule); true (option forward_order=persistent,
// built in at short N: flash3_fp8.cpp): flash3's schedules in kOrder_
// (HeadMajor: PersistentSchedule; Paired: causal units of a head's longest and shortest
// query tiles), with a "Q empty" barrier so that the next work's Q is loaded while the consumers
// finish the current one.
template <int kHeadDim_, int kStages_, bool kPersistent_ = false,
          hopper::WorkOrder kOrder_ = hopper::WorkOrder::HeadMajor>
struct Fp8Traits : hopper::WarpSpecialized<2, 56, 224> {
  using Element = __nv_bfloat16;  // the output
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kTileM = 128;
  static constexpr int kTileN = 128;
  static constexpr int kStages = kStages_;
  static constexpr bool kPersistent = kPersistent_;
  static constexpr hopper::WorkOrder kOrder = kOrder_;

  static constexpr int kRowsPerConsumer = kTileM / kConsumers;
  static constexpr int kProducerWarps = 4;  // arrivals that publish a transposed V

  // Q, K and V rows as TMA writes them: head_dim bytes, swizzled over the whole row (128B for
  // d128, 64B for d64: the swizzle span must hold the box's row).
  static constexpr int kRowBytes = kHeadDim;
  static constexpr int kSwizzleBytes = kHeadDim;
  static constexpr int kSwizzlePeriod = 8 * kRowBytes;  // 8 rows: wgmma's SBO for K-major Q, K
  static constexpr int kQBytes = kTileM * kRowBytes;
  static constexpr int kKVBytes = kTileN * kRowBytes;
  // Vᵀ: head_dim rows of kTileN keys (128 bytes), 128B swizzle, keys in P's register order.
  static constexpr int kVtRowBytes = kTileN;
  static constexpr int kVtBytes = kHeadDim * kVtRowBytes;

  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr int kVtOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBarrierOffset = kVtOffset + kStages * kVtBytes;
  // Barriers: Q full, K full ×stages, V full ×stages (TMA), Vᵀ full ×stages (producer warps),
  // K empty ×stages and Vᵀ empty ×stages (consumer warps), Q empty (persistent only).
  static constexpr int kBarrierBytes = 8 * (1 + 5 * kStages + (kPersistent ? 1 : 0));
  static constexpr int kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;  // +1024: base rounded up

  static_assert(kHeadDim == 64 || kHeadDim == 128, "a Q/K/V row is one swizzle span: 64 or 128 bytes");
  static_assert(kQBytes % 1024 == 0 && kKVBytes % 1024 == 0 && kVtBytes % 1024 == 0,
                "every tile starts on a 1024-byte swizzle period");
  static_assert(kVtRowBytes == 128, "Vᵀ rows are one 128B swizzle span");
  static_assert(kStages >= 2, "at least double-buffered K/V");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// d64: 8 KiB per tile; d128: 16 KiB. Three stages: d64 80 KiB, d128 160 KiB of shared memory.
// kPersistent, kOrder: Fp8Traits.
template <int kHeadDim, bool kPersistent = false, hopper::WorkOrder kOrder = hopper::WorkOrder::HeadMajor>
struct Fp8Config {
  using Kernel = Fp8Traits<kHeadDim, 3, kPersistent, kOrder>;
};

}  // namespace attnsuite::cuda::flash3
