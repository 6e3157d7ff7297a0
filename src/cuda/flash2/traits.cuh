// flash2's compile-time configuration: tile sizes, warps and pipeline depth per (dtype, head
// dim), with everything else derived and checked here rather than at the launch site.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace attnsuite::cuda::flash2 {

// One CTA computes kTileM query rows of one (batch, q head) against all its keys, kTileN keys
// at a time. Each warp owns kTileM / kWarps rows (one or two 16-row mma tiles) and the whole
// head dim of their output, so the softmax statistics of a row never leave its quad of lanes.
template <class Element_, int kHeadDim_, int kTileM_, int kTileN_, int kWarps_, int kStages_, int kQRegisterTiles_,
          int kMinBlocksPerSm_>
struct Traits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kTileM = kTileM_;
  static constexpr int kTileN = kTileN_;
  static constexpr int kWarps = kWarps_;
  // K/V tiles in flight: stage i+1 loads while stage i is computed.
  static constexpr int kStages = kStages_;
  // The first kQRegisterTiles of a warp's row tiles keep their Q fragments in registers for the
  // whole CTA; the others are re-read from shared memory per K tile.
  static constexpr int kQRegisterTiles = kQRegisterTiles_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  // The block-sparse variant (BlockSparse<Traits> below) visits only the key blocks of its q
  // block's kept list and may skip P·V per warp; false here, so dense code is unchanged.
  static constexpr bool kBlockSparse = false;

  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = kTileM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // 16-row mma tiles per warp
  static constexpr int kNTiles = kTileN / 8;         // 8-key mma tiles of S per K tile
  static constexpr int kDTiles = kHeadDim / 8;       // 8-column mma tiles of O
  static constexpr int kKSteps = kHeadDim / 16;      // k-steps of Q·Kᵀ
  static constexpr int kChunksPerRow = kHeadDim * static_cast<int>(sizeof(Element)) / 16;

  static constexpr int kQTileElements = kTileM * kHeadDim;
  static constexpr int kKVTileElements = kTileN * kHeadDim;
  static constexpr int kSmemBytes =
      (kQTileElements + 2 * kStages * kKVTileElements) * static_cast<int>(sizeof(Element));

  static_assert(sizeof(Element) == 2, "flash2 computes on 16-bit inputs (fp16, bf16)");
  static_assert(kTileM % (16 * kWarps) == 0 && kMTiles >= 1 && kMTiles <= 2,
                "each warp owns one or two 16-row mma tiles");
  static_assert(kTileN % 16 == 0, "P·V consumes keys 16 at a time");
  static_assert(kHeadDim % 64 == 0, "the XOR swizzle spans 8 chunks of 16 bytes: head dim >= 64");
  static_assert(kQRegisterTiles >= 0 && kQRegisterTiles <= kMTiles, "Q register tiles: 0 .. row tiles per warp");
  static_assert(kStages >= 2, "at least double-buffered K/V");
  static_assert((kTileM * kChunksPerRow) % kThreads == 0 && (kTileN * kChunksPerRow) % kThreads == 0,
                "tile loads divide evenly among the threads");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// The block-sparse kernel on the same tiles (src/cuda/sparge, issue 6). Derived rather than a
// Traits parameter so that the dense kernels' types and mangled names stay exactly as they were.
template <class Base>
struct BlockSparse : Base {
  static constexpr bool kBlockSparse = true;
};

// The chosen configuration per (dtype, head dim); the dtype does not change the tiles.
template <class Element, int kHeadDim>
struct Config;

// d64: 2 mma tiles (32 rows) per warp halve the shared-memory reads of K and V per FLOP; Q
// (32 regs), O (64) and S (64) fit in 255 registers with 2 CTAs per SM. Measured on the H200
// (bf16, fa3-grid): 252–307 TFLOP/s dense, 167–294 causal, 0.94–1.11× PyTorch's FA2.
template <class Element>
struct Config<Element, 64> {
  using Kernel = Traits<Element, 64, 128, 64, 4, 2, 2, 2>;
};
// d128: 4 warps × 32 rows, Q re-read from shared memory (O is 128 registers at 32 rows), K/V
// tiles of 32 keys so that O + S fit in 255 registers without spilling; 2 CTAs per SM. Each
// ldmatrix of K/V then feeds two row tiles. Measured on the H200 (bf16, fa3-grid, same run):
// 266–324 TFLOP/s dense, 179–295 causal, against 216–261 / 152–261 for 8 warps × 16 rows
// with Q in registers (128×64 tile), whose 16 rows per warp read K and V twice as often per
// FLOP; a 128×64 tile with 4 warps spills 120 bytes and ran 1% slower than this one.
template <class Element>
struct Config<Element, 128> {
  using Kernel = Traits<Element, 128, 128, 32, 4, 2, 0, 2>;
};
// d256: O alone is 128 registers per thread, so Q is re-read from shared memory and the K/V
// tile is 32 keys: 32 KiB Q + 2 stages × 2 × 16 KiB = 96 KiB, 2 CTAs per SM.
template <class Element>
struct Config<Element, 256> {
  using Kernel = Traits<Element, 256, 64, 32, 4, 2, 0, 2>;
};

}  // namespace attnsuite::cuda::flash2
