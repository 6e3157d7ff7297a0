// The tiles of the mma.sync kernels that walk a query tile's keys (flash2's and sage's forward,
// flash2's deterministic dQ kernel): the compile-time configuration they share, as members their
// Traits inherit.
#pragma once

namespace attnsuite::cuda::sm80 {

// One CTA computes kTileM query rows of one (batch, q head) against its keys, kTileN at a time.
// Each warp owns kTileM / kWarps rows (one or two 16-row mma tiles) and the whole head dim of
// their output, so the softmax statistics of a row never leave its quad of lanes. Element is the
// 16-bit dtype of the output (fp16, bf16).
template <class Element_, int kHeadDim_, int kTileM_, int kTileN_, int kWarps_, int kStages_, int kQRegisterTiles_,
          int kMinBlocksPerSm_>
struct ForwardTiles {
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

  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = kTileM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // 16-row mma tiles per warp
  static constexpr int kNTiles = kTileN / 8;         // 8-key mma tiles of S per K tile
  static constexpr int kDTiles = kHeadDim / 8;       // 8-column mma tiles of O

  static_assert(sizeof(Element) == 2, "a 16-bit output (fp16, bf16)");
  static_assert(kTileM % (16 * kWarps) == 0 && kMTiles >= 1 && kMTiles <= 2,
                "each warp owns one or two 16-row mma tiles");
  static_assert(kQRegisterTiles >= 0 && kQRegisterTiles <= kMTiles, "Q register tiles: 0 .. row tiles per warp");
  static_assert(kStages >= 2, "at least double-buffered K/V");
};

}  // namespace attnsuite::cuda::sm80
