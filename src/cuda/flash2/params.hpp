// What the flash2 launcher hands the kernel (common/kernel_params.hpp), and the block-sparse
// kernel's additions (sparge); the backward's params are common/kernel_params.hpp's BackwardParams.
#pragma once

#include <cstdint>

#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda::flash2 {

using Params = AttentionParams;

// The block-sparse kernel's extra inputs (BlockSparse<Traits>): per (batch, q head, q block) the
// ascending list of key blocks to visit — within the q block's visible range, as the predictor
// and sparse::normalize_mask guarantee — and per q head the P·V skip threshold.
struct SparseParams : Params {
  const int* block_index = nullptr;  // (batch, heads_q, m_blocks, n_blocks): kept key blocks
  const int* block_count = nullptr;  // (batch, heads_q, m_blocks): entries used in each list
  int m_blocks = 0;
  int n_blocks = 0;
  // Per q head, λ·log2(e): a warp skips P·V of a block when every row's block max is below its
  // running max by more than λ (scaled units); +inf never skips.
  const float* pv_threshold_log2 = nullptr;
  unsigned long long* pv_skips = nullptr;  // may be null: += skipped (warp, block) pairs
};

}  // namespace attnsuite::cuda::flash2
