// What every fused attention kernel's launcher hands it (flash2, flash3, flash3-fp8, and sparge
// through flash2's): pointers, strides in elements and sizes. Plain data, no templates and no
// CUDA headers, so nothing above the launchers sees a kernel's configuration; the host fills it
// from a problem and its tensors with fill_attention_params (attention_params.hpp).
#pragma once

#include <cstdint>

namespace attnsuite::cuda {

struct AttentionParams {
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

// The backward kernels' (flash2's backward_kernel.cuh, flash3's backward_kernel.cuh, the
// row-wise ones of backward_rows.cuh): AttentionParams' q, k, v, o (the forward's output) and lse
// (the forward's, natural log) as inputs, plus dO, the gradients and the workspace's pieces
// (backward_workspace.hpp).
struct BackwardParams : AttentionParams {
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
  int seq_q_padded = 0;  // seq_q rounded up to kBackwardRowPadding (backward_rows.hpp)
  float* lse_log2 = nullptr;
  float* row_dot = nullptr;
  float* dq_accum = nullptr;  // null: dQ by the separate (deterministic) dQ kernel
};

}  // namespace attnsuite::cuda
