// flash2's compile-time configuration: tile sizes, warps and pipeline depth per (dtype, head
// dim), with everything else derived and checked here rather than at the launch site.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/sm80/forward_tiles.cuh"

namespace attnsuite::cuda::flash2 {

// One CTA computes kTileM query rows of one (batch, q head) against all its keys, kTileN keys
// at a time: sm80::ForwardTiles holds the tiles, warps and stages, and what follows from them, as
// members; what is flash2's own is defined here from the same template parameters.
template <class Element, int kHeadDim, int kTileM, int kTileN, int kWarps, int kStages, int kQRegisterTiles,
          int kMinBlocksPerSm>
struct Traits
    : sm80::ForwardTiles<Element, kHeadDim, kTileM, kTileN, kWarps, kStages, kQRegisterTiles, kMinBlocksPerSm> {
  // The block-sparse variant (BlockSparse<Traits> below) visits only the key blocks of its q
  // block's kept list and may skip P·V per warp; false here, so dense code is unchanged.
  static constexpr bool kBlockSparse = false;

  static constexpr int kKSteps = kHeadDim / 16;  // k-steps of Q·Kᵀ
  static constexpr int kChunksPerRow = kHeadDim * static_cast<int>(sizeof(Element)) / 16;

  static constexpr int kQTileElements = kTileM * kHeadDim;
  static constexpr int kKVTileElements = kTileN * kHeadDim;
  static constexpr int kSmemBytes =
      (kQTileElements + 2 * kStages * kKVTileElements) * static_cast<int>(sizeof(Element));

  static_assert(kTileN % 16 == 0, "P·V consumes keys 16 at a time");
  static_assert(kHeadDim % 64 == 0, "the XOR swizzle spans 8 chunks of 16 bytes: head dim >= 64");
  static_assert((kTileM * kChunksPerRow) % (kWarps * 32) == 0 && (kTileN * kChunksPerRow) % (kWarps * 32) == 0,
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
