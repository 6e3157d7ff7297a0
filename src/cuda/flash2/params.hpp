// What the flash2 launcher hands the kernel (common/kernel_params.hpp), and the block-sparse
// kernel's additions (sparge).
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

// The backward's (backward_kernel.cuh): Params' q, k, v, o (the forward's output) and lse (the
// forward's, natural log) as inputs, plus dO, the gradients and the workspace's pieces.
struct BackwardParams : Params {
  const void* d_o = nullptr;  // like o
  void* dq = nullptr;         // like q
  void* dk = nullptr;         // like k
  void* dv = nullptr;         // like v
  std::int64_t d_o_batch_stride = 0, d_o_row_stride = 0, d_o_head_stride = 0;
  std::int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  std::int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  std::int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;

  // The workspace, (batch, heads_q, seq_q_padded) rows: LSE·log2 e (+inf where the row sees no
  // key or is padding, so that its P is 0), D = rowsum(dO∘O), and (atomic dQ only) the fp32
  // dQ sums, head_dim floats a row.
  int seq_q_padded = 0;  // seq_q rounded up to kBackwardQueryTile
  float* lse_log2 = nullptr;
  float* row_dot = nullptr;
  float* dq_accum = nullptr;  // null: dQ by the separate (deterministic) dQ kernel
};

}  // namespace attnsuite::cuda::flash2
