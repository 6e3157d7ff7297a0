// The compile-time configuration of flash2's backward (backward_kernel.cuh): the main kernel's
// key tile and warps, the deterministic dQ kernel's tiles, and the shared memory both need,
// derived and checked here rather than at the launch site.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/backward_rows.hpp"
#include "cuda/sm80/forward_tiles.cuh"

namespace attnsuite::cuda::flash2 {

// The deterministic dQ kernel's query tile (DqTraits).
inline constexpr int kBackwardQueryTile = 64;

// The main kernel: one CTA owns kTileN = 16·kWarps keys of one (batch, kv head), each warp 16 of
// them, and walks every query tile (kTileM rows) of every q head of the group that sees them.
// A warp keeps dK and dV of its 16 keys in registers for the whole CTA (2 × kHeadDim / 2 fp32
// per thread) and computes the transposed products Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, so that its rows
// are its keys: Pᵀ and dSᵀ are then the A operands of dV += Pᵀ·dO and dK += dSᵀ·Q straight from
// the accumulators (the forward's P·V step, sm80::accumulate_pv). dQ = dS·K needs dS by query
// rows: dSᵀ goes through shared memory and the kTileM × kHeadDim dQ tile is split among the warps.
template <class Element_, int kHeadDim_, int kTileM_, int kWarps_, bool kKVInRegisters_, int kMinBlocksPerSm_>
struct BackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTileN = 16 * kWarps;  // keys of the CTA
  static constexpr int kTileM = kTileM_;      // query rows per step
  // K and V fragments (A of Sᵀ and dPᵀ) kept in registers for the whole CTA instead of re-read
  // from shared memory per query tile: 2 · kHeadDim / 4 registers.
  static constexpr bool kKVInRegisters = kKVInRegisters_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;

  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kQueryTiles = kTileM / 8;  // 8-query mma tiles of Sᵀ
  static constexpr int kDTiles = kHeadDim / 8;    // 8-column mma tiles of dK, dV, dQ
  static constexpr int kKSteps = kHeadDim / 16;   // k-steps of K·Qᵀ and V·dOᵀ
  static constexpr int kKeySteps = kTileN / 16;   // k-steps of dS·K
  // dQ's kTileM × kHeadDim tile: kDqRowBlocks blocks of 16 rows × kDqColumnGroups column groups
  // of kDqDTiles 8-column tiles, one (block, group) per warp.
  static constexpr int kDqRowBlocks = kTileM / 16;
  static constexpr int kDqColumnGroups = kWarps / kDqRowBlocks;
  static constexpr int kDqDTiles = kDTiles / (kDqColumnGroups > 0 ? kDqColumnGroups : 1);

  // Shared memory: K and V tiles, two stages of Q, dO and their rows' LSE·log2 e and D, and dSᵀ
  // (kTileN keys × kTileM queries, 16-bit).
  static constexpr int kKVTileBytes = kTileN * kRowBytes;
  static constexpr int kQTileBytes = kTileM * kRowBytes;
  static constexpr int kDsRowBytes = kTileM * 2;
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + kKVTileBytes;
  static constexpr int kQOffset = kVOffset + kKVTileBytes;
  static constexpr int kDOOffset = kQOffset + 2 * kQTileBytes;
  static constexpr int kDsOffset = kDOOffset + 2 * kQTileBytes;
  static constexpr int kLseOffset = kDsOffset + kTileN * kDsRowBytes;
  static constexpr int kDotOffset = kLseOffset + 2 * kTileM * 4;
  static constexpr int kSmemBytes = kDotOffset + 2 * kTileM * 4;

  static_assert(sizeof(Element) == 2, "flash2 computes on 16-bit inputs (fp16, bf16)");
  static_assert(kHeadDim % 64 == 0, "the XOR swizzle spans 8 chunks of 16 bytes: head dim >= 64");
  static_assert(kTileM == 32 || kTileM == 64, "dSᵀ rows of 64 or 128 bytes (sm80/tile.cuh's swizzle)");
  static_assert(kBackwardRowPadding % kTileM == 0, "the workspace's padded rows hold whole query tiles");
  static_assert(kDqColumnGroups >= 1 && kWarps % kDqRowBlocks == 0 && kDTiles % (2 * kDqColumnGroups) == 0,
                "dQ's tile divides evenly among the warps, 16-column pairs each");
  static_assert((kTileN * kHeadDim / 8) % kThreads == 0 && (kTileM * kHeadDim / 8) % kThreads == 0,
                "tile loads divide evenly among the threads");
  static_assert(2 * (kTileM / 4) <= kThreads, "one thread per 16-byte chunk of the LSE and D rows");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// The tiled main kernel (backward_split=tiles; backward_tiles_kernel.cuh): FlashAttention-2's
// split. A CTA of 8 warps owns kTileN = 128 keys; per query tile of kTileM rows the warps tile
// each product instead of each owning 16 keys:
//   S = Q·Kᵀ and dP = dO·Vᵀ   2 × 4 warps, (kTileM / 2) rows × 32 keys each
//   P, dS                     to shared memory (kTileM × kTileN, 16-bit), one barrier
//   dV += Pᵀ·dO, dK += dSᵀ·Q  4 × 2 warps, 32 keys × kHeadDim / 2 columns each (registers)
//   dQ = dS·K                 2 × 4 warps, (kTileM / 2) rows × kHeadDim / 4 columns, atomics
// so each barrier, Q/dO tile load and dQ atomic serves 128 keys, and a warp's S, dP and dQ
// tiles hold 2·(kTileM / 2) / 16 independent accumulator rows (the key-row kernel: one).
template <class Element_, int kHeadDim_, int kTileM_>
struct TiledBackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kTileN = 128;
  static constexpr int kTileM = kTileM_;

  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kKSteps = kHeadDim / 16;  // k-steps of Q·Kᵀ and dO·Vᵀ
  // S and dP: warp (warp % 2, warp / 2) of a 2 × 4 grid.
  static constexpr int kSRows = kTileM / 2, kSKeys = kTileN / 4;
  static constexpr int kSMTiles = kSRows / 16, kSNTiles = kSKeys / 8;
  // dK and dV: warp (warp % 4, warp / 4) of a 4 × 2 grid; k = the tile's queries.
  static constexpr int kKVKeys = kTileN / 4, kKVColumns = kHeadDim / 2;
  static constexpr int kKVMTiles = kKVKeys / 16, kKVDTiles = kKVColumns / 8, kQuerySteps = kTileM / 16;
  // dQ: warp (warp % 2, warp / 2) of a 2 × 4 grid; k = the tile's keys.
  static constexpr int kDqRows = kTileM / 2, kDqColumns = kHeadDim / 4;
  static constexpr int kDqMTiles = kDqRows / 16, kDqDTiles = kDqColumns / 8, kKeySteps = kTileN / 16;

  // Shared memory: K and V, two stages of Q, dO and their rows' LSE·log2 e and D, P and dS
  // (rows = queries, kTileN keys of 16 bits: 256-byte rows).
  static constexpr int kKVTileBytes = kTileN * kRowBytes;
  static constexpr int kQTileBytes = kTileM * kRowBytes;
  static constexpr int kPRowBytes = kTileN * 2;
  static constexpr int kPTileBytes = kTileM * kPRowBytes;
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = kKOffset + kKVTileBytes;
  static constexpr int kQOffset = kVOffset + kKVTileBytes;
  static constexpr int kDOOffset = kQOffset + 2 * kQTileBytes;
  static constexpr int kPOffset = kDOOffset + 2 * kQTileBytes;
  static constexpr int kDsOffset = kPOffset + kPTileBytes;
  static constexpr int kLseOffset = kDsOffset + kPTileBytes;
  static constexpr int kDotOffset = kLseOffset + 2 * kTileM * 4;
  static constexpr int kSmemBytes = kDotOffset + 2 * kTileM * 4;

  static_assert(sizeof(Element) == 2, "flash2 computes on 16-bit inputs (fp16, bf16)");
  static_assert(kHeadDim % 64 == 0, "the XOR swizzle spans 8 chunks of 16 bytes: head dim >= 64");
  static_assert(kTileM % 32 == 0 && kBackwardRowPadding % kTileM == 0,
                "two 16-row blocks per warp row; the workspace's padded rows hold whole query tiles");
  static_assert(kKVDTiles % 2 == 0 && kDqDTiles % 2 == 0 && kSNTiles % 2 == 0, "16-column ldmatrix pairs");
  static_assert((kTileN * kHeadDim / 8) % kThreads == 0 && (kTileM * kHeadDim / 8) % kThreads == 0,
                "tile loads divide evenly among the threads");
  static_assert(2 * (kTileM / 4) <= kThreads, "one thread per 16-byte chunk of the LSE and D rows");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// The deterministic mode's dQ kernel: the forward's shape (sm80::ForwardTiles: one CTA per kTileM
// query rows of one (batch, q head), 16 rows a warp, K/V tiles of kTileN keys through a
// kStages-deep cp.async ring, Q re-read from shared memory), recomputing S, P, dP and dS per K/V
// tile and keeping dQ in registers: no atomics, dQ written once.
template <class Element, int kHeadDim, int kTileN, int kStages, int kMinBlocksPerSm>
struct DqTraits : sm80::ForwardTiles<Element, kHeadDim, kBackwardQueryTile, kTileN, kBackwardQueryTile / 16, kStages, 0,
                                     kMinBlocksPerSm> {
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kKSteps = kHeadDim / 16;

  static constexpr int kQTileBytes = kBackwardQueryTile * kRowBytes;
  static constexpr int kKVTileBytes = kTileN * kRowBytes;
  static constexpr int kQOffset = 0;
  static constexpr int kDOOffset = kQTileBytes;
  static constexpr int kKOffset = 2 * kQTileBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVTileBytes;
  static constexpr int kSmemBytes = kVOffset + kStages * kKVTileBytes;

  static_assert(kHeadDim % 64 == 0, "the XOR swizzle spans 8 chunks of 16 bytes: head dim >= 64");
  static_assert(kTileN % 16 == 0, "dS·K consumes keys 16 at a time");
  static_assert((kBackwardQueryTile * kHeadDim / 8) % DqTraits::kThreads == 0 &&
                    (kTileN * kHeadDim / 8) % DqTraits::kThreads == 0,
                "tile loads divide evenly among the threads");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
  static_assert(kBackwardRowPadding % kBackwardQueryTile == 0, "the workspace's padded rows hold whole query tiles");
};

// The configuration per (dtype, head dim, keys per CTA). Registers and spills as ptxas reports
// them (CUDA 13, sm_80; docs/kernels/flash2.md has both architectures). kKeyTile 64 (4 warps) is
// the default; 128 (8 warps, the backend option backward_key_tile=128) is FlashAttention-2's key
// block: each Q/dO tile loaded, each dQ atomic and each barrier then serve twice the keys.
// First GPU run (H100, 2026-12-06, fa3-grid-bwd N 4096/16384): the 64-key kernel was correct on
// every test it reached and 0.49-0.50x FlashAttention-2's backward (torch-flash) at d64 and d128.
template <class Element, int kHeadDim, int kKeyTile = 64>
struct BackwardConfig;

// d64: 4 warps × 16 keys, 64-query tiles, K and V fragments in registers; dK and dV are 32 + 32
// fp32 per thread, Sᵀ and dPᵀ 32 + 32. Without the fragments in registers (12 bytes spilled
// instead of 16 with atomic dQ) the K and V tiles are re-read per query tile.
template <class Element>
struct BackwardConfig<Element, 64> {
  using Kernel = BackwardTraits<Element, 64, 64, 4, true, 2>;
  using DqKernel = DqTraits<Element, 64, 64, 2, 2>;
};
// d128: dK and dV are 64 + 64 fp32 per thread, so K and V are re-read from shared memory and the
// query tile is 32 rows (Sᵀ, dPᵀ 16 + 16): with 64 rows the atomic-dQ kernel spilled 144 bytes,
// with 32 it spills 20. The dQ kernel's K/V tiles are 32 keys as in the forward (64: 200 bytes
// spilled; 32: none).
template <class Element>
struct BackwardConfig<Element, 128> {
  using Kernel = BackwardTraits<Element, 128, 32, 4, false, 2>;
  using DqKernel = DqTraits<Element, 128, 32, 2, 2>;
};
// 128 keys: the same per-warp work (16 keys, the registers above) on 8 warps, one CTA per SM;
// dQ's tile split 4 × 2 (d64) and 2 × 4 (d128) among them.
template <class Element>
struct BackwardConfig<Element, 64, 128> {
  using Kernel = BackwardTraits<Element, 64, 64, 8, true, 1>;
  using DqKernel = typename BackwardConfig<Element, 64>::DqKernel;
};
template <class Element>
struct BackwardConfig<Element, 128, 128> {
  using Kernel = BackwardTraits<Element, 128, 32, 8, false, 1>;
  using DqKernel = typename BackwardConfig<Element, 128>::DqKernel;
};

// The tiled kernel's configuration (backward_split=tiles): FlashAttention-2's sm80 tiles — 128
// query rows at d64, 64 at d128. Per thread: dK and dV 32 + 32 fp32 at d64, 64 + 64 at d128; S and
// dP 64 + 64 at d64, 32 + 32 at d128. The deterministic mode's dQ kernel as the key-row one.
template <class Element, int kHeadDim>
struct TiledBackwardConfig {
  using Kernel = TiledBackwardTraits<Element, kHeadDim, kHeadDim == 64 ? 128 : 64>;
  using DqKernel = typename BackwardConfig<Element, kHeadDim>::DqKernel;
};

}  // namespace attnsuite::cuda::flash2
