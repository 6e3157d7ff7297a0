// sage's compile-time configuration per (mode, dtype, head dim): tiles, warps, pipeline depth,
// and everything derived from them, checked here rather than at the launch site.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/sage/quant_rule.hpp"
#include "cuda/sm80/forward_tiles.cuh"

namespace attnsuite::cuda::sage {

// One CTA computes kTileM query rows of one (batch, q head) against its keys, kTileN at a time;
// each warp owns kTileM / kWarps rows (one or two 16-row mma tiles) and their whole output, as
// in flash2: sm80::ForwardTiles holds the tiles, warps and stages, and what follows from them, as
// members; what is sage's own is defined here from the same template parameters. Element is the
// 16-bit dtype of V (sage) and O.
template <Mode kMode_, class Element, int kHeadDim, int kTileM, int kTileN, int kWarps, int kStages,
          int kQRegisterTiles, int kMinBlocksPerSm>
struct Traits
    : sm80::ForwardTiles<Element, kHeadDim, kTileM, kTileN, kWarps, kStages, kQRegisterTiles, kMinBlocksPerSm> {
  static constexpr Mode kMode = kMode_;

  static constexpr int kKSteps = kHeadDim / 32;  // k-steps of the INT8 m16n8k32 Q·Kᵀ
  static constexpr int kQBlockRows = q_block_rows(kMode);
  static constexpr int kKBlockRows = k_block_rows(kMode, kHeadDim);

  // Shared memory, bytes: INT8 Q tile, INT8 K ring, V ring (16-bit rows of keys for sage,
  // FP8 rows of channels for sage2). O is staged through the start of it at the end.
  static constexpr int kQBytes = kTileM * kHeadDim;
  static constexpr int kKBytes = kTileN * kHeadDim;
  static constexpr int kVBytes = kTileN * kHeadDim * (kMode == Mode::Sage ? 2 : 1);
  static constexpr int kLoopBytes = kQBytes + kStages * (kKBytes + kVBytes);
  static constexpr int kOutBytes = kTileM * kHeadDim * 2;
  static constexpr int kSmemBytes = kLoopBytes > kOutBytes ? kLoopBytes : kOutBytes;

  static_assert(kTileN % 32 == 0, "FP8 P·V consumes keys 32 at a time; kTileN a multiple of 32");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim 64 or 128");
  static_assert(kTileM % kQBlockRows == 0 && (kQBlockRows == 1 || kQBlockRows % 16 == 0),
                "a Q scale block is one row or whole 16-row mma tiles, and divides the tile");
  static_assert(
      k_key_groups(kMode) ? kKGroupTileKeys % kTileN == 0 : kKBlockRows % 8 == 0 && kTileN % kKBlockRows == 0,
      "a K scale block holds whole 8-key mma tiles and divides the tile; a key tile lies in one tile of key groups");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than one sm_90 CTA can have");
};

// The chosen configurations: flash2's tiles (docs/kernels/history/flash2.md records why they won
// there); Q·Kᵀ halves its shared-memory bytes in INT8, P·V is flash2's (sage) or FP8 (sage2).
// d64: 4 warps × 32 rows, Q fragments (16 registers in INT8) held in registers; 64-key tiles
// for sage, 32 for sage2 (ptxas, sm_90a: 64-key tiles spill 40 bytes there — the INT8 and the
// dequantized fp32 scores of a tile are both live — and with Q in shared memory still 40).
// d128: 4 warps × 32 rows, 32-key tiles (O is 128 registers), Q re-read from shared memory
// (ptxas, sm_90a: sage 24 bytes of spill, as flash2 had at 128×64 d128; sage2 none).
template <Mode kMode, class Element, int kHeadDim>
struct Config;
template <Mode kMode, class Element>
struct Config<kMode, Element, 64> {
  using Kernel = Traits<kMode, Element, 64, 128, kMode == Mode::Sage ? 64 : 32, 4, 2, 2, 2>;
};
template <Mode kMode, class Element>
struct Config<kMode, Element, 128> {
  using Kernel = Traits<kMode, Element, 128, 128, 32, 4, 2, 0, 2>;
};

}  // namespace attnsuite::cuda::sage
