// What the flash3 launcher hands the kernel besides the three TMA descriptors: every fused
// kernel's fields (common/kernel_params.hpp) and flash3's own. Plain data, no CUDA headers.
#pragma once

#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda::flash3 {

// Q, K and V are read through TMA descriptors built from the pointers and strides; O and LSE are
// written directly.
struct Params : AttentionParams {
  // Consumer schedule (docs/kernels/history/flash3.md, v1 and v2): false = v2, the default (Q·Kᵀ of
  // tile j+1 issued before the softmax of tile j, ping-pong between the two consumers); true =
  // v1 (one tile at a time, both GEMMs waited), kept as kernel config "v1" to measure against.
  bool serial_schedule = false;

  // Persistent CTAs (the default since v4, docs/kernels/flash3.md): the launcher starts
  // min(works, SMs) CTAs that each loop over works b, b + grid, ...; false (kernel config "grid"):
  // one CTA per work, as up to v3. q_tiles and works are filled in by the launcher.
  bool persistent = true;
  int q_tiles = 0;  // ⌈seq_q / kTileM⌉
  int works = 0;    // q_tiles · heads_q · batch

  // Block-sparse (`sparge` / `block-sparse` on sm_90a, src/cuda/sparge/): when block_index is
  // set, the CTA of q tile m visits only the key tiles block_index[slot · n_blocks + i] for
  // i < block_count[slot] (ascending, inside the tile's visible range; slot = (batch · heads_q
  // + q head) · m_blocks + m) instead of every visible one: the skipped tiles are neither
  // loaded nor multiplied. Blocks are the kernel's tiles, kTileM × kTileN = 128 × 128 (the
  // 128-row configs only: not m192). Null: dense.
  const int* block_index = nullptr;
  const int* block_count = nullptr;
  int m_blocks = 0, n_blocks = 0;
};

}  // namespace attnsuite::cuda::flash3
