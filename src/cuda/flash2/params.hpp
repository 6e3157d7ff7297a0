// The one thing the flash2 launcher hands the kernel: pointers, strides in elements and sizes.
// Plain data, no templates, so nothing above launch.cu sees the kernel's configuration.
#pragma once

#include <cstdint>

namespace attnsuite::cuda::flash2 {

struct Params {
  const void* q = nullptr;  // (batch, seq_q, heads_q, head_dim), last dim contiguous
  const void* k = nullptr;  // (batch, seq_kv, heads_kv, head_dim)
  const void* v = nullptr;  // (batch, seq_kv, heads_kv, head_dim)
  void* o = nullptr;        // (batch, seq_q, heads_q, head_dim), same dtype as q
  float* lse = nullptr;     // (batch, heads_q, seq_q) dense, natural log; may be null

  std::int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  std::int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  std::int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  std::int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;

  int batch = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int group_size = 1;  // heads_q / heads_kv: q head h reads kv head h / group_size
  int seq_q = 0;
  int seq_kv = 0;
  int head_dim = 0;

  float scale = 0.0f;       // softmax scale, for the natural-log LSE
  float scale_log2 = 0.0f;  // scale · log2(e): the kernel's exponentials are exp2

  // Bottom-right aligned mask (AttentionProblem::key_begin/key_end): query i keeps keys in
  // [diag - window_left, diag + window_right] with diag = i + seq_kv - seq_q; -1 = unbounded.
  // Causal is window_right = min(window_right, 0), folded in by the host.
  int window_left = -1;
  int window_right = -1;
};

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
