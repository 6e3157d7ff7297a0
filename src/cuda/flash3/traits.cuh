// flash3's compile-time configuration per (dtype, head dim): tiles, pipeline depth, register
// split and the shared-memory layout, all derived and checked here rather than at the launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/hopper/register_split.hpp"
#include "cuda/hopper/work_order.hpp"

namespace attnsuite::cuda::flash3 {

// A CTA owns kTileM = 64 · kConsumers query rows of one (batch, q head): warpgroup 0 is the
// producer (one thread issues every TMA copy), warpgroups 1 .. kConsumers are the consumers, 64
// rows each (one wgmma M = 64 tile). K/V tiles of kTileN keys stream through a kStages-deep
// shared ring. kConsumers = 2 (128-row tiles) is every head dim's default; 3 (192-row tiles) is
// kernel config "m192" at d64 (ConfigM192 below).
// kFmaExp2Every_ > 0 (kernel config "m192-fmaexp"): every kFmaExp2Every-th 8-key group of
// scores takes its exponentials on the FMA pipe (online_softmax.cuh).
// setmaxnreg: __launch_bounds__(kThreads, 1) gives every thread 65536 / kThreads registers
// (168 at 384 threads, 128 at 512); the producer hands its surplus to the consumers:
// 2 consumers: 128·24 + 256·240 = 384·168; 3 consumers: 128·24 + 384·160 = 64512 ≤ 512·128.
template <class Element_, int kHeadDim_, int kTileN_, int kStages_, int kConsumers_ = 2, int kFmaExp2Every_ = 0,
          hopper::WorkOrder kOrder_ = hopper::WorkOrder::HeadMajor>
struct Traits : hopper::WarpSpecialized<kConsumers_, 24, kConsumers_ == 2 ? 240 : 160> {
  using Split = hopper::WarpSpecialized<kConsumers_, 24, kConsumers_ == 2 ? 240 : 160>;
  using Split::kConsumerRegisters, Split::kConsumers, Split::kConsumerWarps, Split::kProducerRegisters, Split::kThreads;
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kTileM = 64 * kConsumers_;  // 128, or 192 for m192
  static constexpr int kTileN = kTileN_;
  static constexpr int kStages = kStages_;
  static constexpr int kFmaExp2Every = kFmaExp2Every_;
  // The works' order (hopper/scheduler.cuh): HeadMajor, each head's query tiles in a row (the
  // longest first); LongestFirst (m192 on non-causal windows, option forward_order=longest-first):
  // bands of one query tile over every head, the longest band first; Paired (causal problems,
  // option forward_order=paired): units of a head's longest and shortest query tiles,
  // head-major. The last two run on persistent CTAs on masked problems too.
  static constexpr hopper::WorkOrder kOrder = kOrder_;

  static constexpr int kRowsPerConsumer = kTileM / kConsumers_;
  // The softmax's element mask takes every row's key range from 4 registers computed before the
  // main loop instead of evaluating key_range (64-bit) on every boundary tile: the latter needs
  // more temporaries than m192's 160 registers leave beside S, P and O (ptxas spilled 88 bytes),
  // and than n176's and d256's 240 do beside theirs (72 and 12 bytes, the latter with the
  // persistent loop's state).
  static constexpr bool kPrecomputedKeyRanges = kConsumers == 3 || kTileN == 176 || kHeadDim == 256;
  // Params::block_index (sparge's block-sparse lists) counts in 128 × 128 tiles: only the
  // 128 × 128 configs read it; m192 and n176 compile it out (registers they do not have).
  static constexpr bool kTakesBlockList = kTileM == 128 && kTileN == 128;

  // Shared memory holds every tile as 64-column slabs (128 bytes of a row: the TMA box width
  // and the 128-byte swizzle span), each slab [rows][64] with the 128B swizzle of TMA and wgmma.
  static constexpr int kSlabs = kHeadDim / 64;
  static constexpr int kSlabRowBytes = 128;
  static constexpr int kQSlabBytes = kTileM * kSlabRowBytes;
  static constexpr int kKVSlabBytes = kTileN * kSlabRowBytes;
  static constexpr int kQBytes = kSlabs * kQSlabBytes;    // one TMA transaction total for Q
  static constexpr int kKVBytes = kSlabs * kKVSlabBytes;  // ... and for one K (or V) tile
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr int kBarrierOffset = kVOffset + kStages * kKVBytes;
  // Barriers: Q full, K full ×stages, V full ×stages, K empty ×stages, V empty ×stages, Q empty
  // (8 bytes each).
  static constexpr int kBarrierBytes = 8 * (2 + 4 * kStages);
  // +1024: nothing promises the dynamic shared memory a 1024-byte aligned start; the kernel
  // rounds its base up to the 1024-byte period of the 128B swizzle.
  static constexpr int kSmemBytes = kBarrierOffset + kBarrierBytes + 1024;

  static_assert(sizeof(Element) == 2, "flash3 computes on 16-bit inputs (fp16, bf16)");
  static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "head dim: 64-column slabs, wgmma N <= 256 for P·V");
  static_assert(kTileN % 16 == 0 && kTileN <= 256, "S = Q·Kᵀ is one wgmma N = kTileN; P·V consumes 16 keys a step");
  static_assert(kTileN % 8 == 0 && kKVSlabBytes % 1024 == 0, "every slab starts on a 1024-byte swizzle period");
  static_assert(kStages >= 2, "at least double-buffered K/V");
  static_assert(kConsumers == 2 || kConsumers == 3, "2 or 3 consumer warpgroups (named barriers 1 .. kConsumers)");
  static_assert(kConsumerRegisters % 8 == 0 && kConsumerRegisters >= 65536 / kThreads / 8 * 8,
                "setmaxnreg.inc: a multiple of 8, not below the launch bound's share");
  static_assert(kTileM <= 256, "Q is one TMA box of kTileM rows (a box dimension is at most 256)");
  static_assert(kQSlabBytes % 1024 == 0 && (kRowsPerConsumer * kSlabRowBytes) % 1024 == 0,
                "every consumer's Q rows start on a 1024-byte swizzle period");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// The chosen configuration per (dtype, head dim); the dtype does not change the tiles.
template <class Element, int kHeadDim>
struct Config;

// d64: S (64 regs) + P (32) + O (32) per consumer thread; 3 stages fit easily (112 KiB), so
// the producer can run two tiles ahead.
template <class Element>
struct Config<Element, 64> {
  using Kernel = Traits<Element, 64, 128, 3>;
};
// Kernel config "m192" (d64 only, not the default): three consumer warpgroups on 192-row Q
// tiles, 512 threads, consumers at 160 registers (S 64 + P 32 + O 32 = 128 live accumulators).
// Per K tile the softmax is as long as at d128 while the GEMMs are half as long; a third
// consumer gives the tensor cores two other warpgroups' GEMMs to run during each softmax.
// 24 KiB Q + 3 stages × (16 + 16) KiB = 120 KiB.
template <class Element>
struct ConfigM192 {
  using Kernel = Traits<Element, 64, 128, 3, 3>;
};
// Kernel config "m192-fmaexp" (d64 only; opt-in): m192 with the
// exponentials of one 8-key group in 8 (12.5%) on the FMA pipe instead of MUFU. At d64 a
// consumer's 64 × 128 tile has 8192 exponentials, 512 MUFU cycles per SM at 16 a cycle, as long
// as its two GEMMs at the dense bf16 rate (2·2·64·128·64 FLOP at ~4096 FLOP a cycle); the FMA
// pipe's ~6 other operations per score leave room for about 1/9 of the exponentials at ~10
// operations each, hence 1 in 8. Measured (H100, 2026-12-06, tune --kernels, B4 H32 N4096 dense
// bf16): 1.064 ms against m192's 1.021 (0.96x): MUFU was not what set the pace at 1/8.
template <class Element>
struct ConfigM192FmaExp2 {
  using Kernel = Traits<Element, 64, 128, 3, 3, 8>;
};
// d128: S 64 + P 32 + O 64 registers; 32 KiB Q + 2 stages × (32 + 32) KiB = 160 KiB (a third
// stage would need 224 KiB, at the limit).
template <class Element>
struct Config<Element, 128> {
  using Kernel = Traits<Element, 128, 128, 2>;
};
// Kernel config "n176" (d128 only, not the default): 176-key K/V tiles, the shape FlashAttention-3
// picks for non-causal d128. Per tile the row max/sum reductions, the O rescale, the barrier
// waits and the ping-pong hand-over are paid once per 176 keys instead of 128, and each GEMM
// batch is 1.375× longer against the other consumer's softmax. S 88 + P 44 + O 64 = 196 live
// accumulator registers of the consumers' 240; 32 KiB Q + 2 stages × (44 + 44) KiB = 208 KiB.
// The last tile of a row range is usually partial (1024 keys = 5 × 176 + 144): masked, its
// missing rows zero-filled by TMA.
template <class Element>
struct ConfigN176 {
  using Kernel = Traits<Element, 128, 176, 2>;
};
// Kernel config "n80" (d256 only; the built-in choice dense from N 1k, causal at N 512 and above
// 4k: Flash3Schedule::builtin): 80-key K/V tiles, the shape FlashAttention-3 picks for d256, where
// 64-key tiles pay the row reductions, the O rescale and the barrier hand-overs every 64 keys
// (H100: 1.05-1.14x the default tiles dense at N 1k-16k). S 40 + P 20 + O 128 = 188 live accumulator
// registers of the consumers' 240; 64 KiB Q + 2 stages × (40 + 40) KiB = 224 KiB.
template <class Element>
struct ConfigN80 {
  using Kernel = Traits<Element, 256, 80, 2>;
};
// A config's kernel with its works in another order (kOrder): longest first, m192's on non-causal
// windows (flash3.cpp's plan) and the default tiles' at d64 and d128 with option
// forward_order=longest-first; paired (forward_order=paired), m192's and the default tiles' at
// d128 and d256.
template <class Kernel, hopper::WorkOrder kOrder>
using Ordered = Traits<typename Kernel::Element, Kernel::kHeadDim, Kernel::kTileN, Kernel::kStages, Kernel::kConsumers,
                       Kernel::kFmaExp2Every, kOrder>;
template <class Kernel>
using LongestFirst = Ordered<Kernel, hopper::WorkOrder::LongestFirst>;
template <class Element>
struct ConfigM192LongestFirst {
  using Kernel = LongestFirst<typename ConfigM192<Element>::Kernel>;
};
template <class Element>
struct ConfigD64LongestFirst {
  using Kernel = LongestFirst<typename Config<Element, 64>::Kernel>;
};
template <class Element>
struct ConfigD128LongestFirst {
  using Kernel = LongestFirst<typename Config<Element, 128>::Kernel>;
};
template <class Element>
struct ConfigM192Paired {
  using Kernel = Ordered<typename ConfigM192<Element>::Kernel, hopper::WorkOrder::Paired>;
};
template <class Element>
struct ConfigD128Paired {
  using Kernel = Ordered<typename Config<Element, 128>::Kernel, hopper::WorkOrder::Paired>;
};
// d256: O alone is 128 registers, so K/V tiles are 64 keys (S 32 + P 16); 64 KiB Q + 2 stages
// × (32 + 32) KiB = 192 KiB.
template <class Element>
struct Config<Element, 256> {
  using Kernel = Traits<Element, 256, 64, 2>;
};
// Paired at d256: 1.03-1.07x the grid causal up to N 4k on the H100, 0.98x at 16k.
template <class Element>
struct ConfigD256Paired {
  using Kernel = Ordered<typename Config<Element, 256>::Kernel, hopper::WorkOrder::Paired>;
};

}  // namespace attnsuite::cuda::flash3
