// The masked row softmax of cuda-vanilla, callable from host code.
#pragma once

#include <cstdint>

#include "attnsuite/dtype.hpp"

namespace attnsuite::cuda::vanilla {

struct SoftmaxParams {
  void* scores = nullptr;  // rows × seq_kv elements of dtype, overwritten with P
  float* lse = nullptr;    // rows floats, or null
  std::int64_t rows = 0;   // batch · heads_q · seq_q; row r is query r % seq_q
  int seq_q = 0;
  int seq_kv = 0;
  // Bottom-right aligned mask: query i keeps keys [begin, end) with diag = i + seq_kv - seq_q,
  // begin = diag - window_left (window_left >= 0), end = diag + window_right + 1 (>= 0).
  // Causal is folded into window_right by the host (min(window_right, 0)).
  int window_left = -1;
  int window_right = -1;
};

// P = softmax(S) row by row in place, in the scores' dtype (fp16/bf16); masked keys get 0 and
// rows with no key are all 0 with LSE = -inf.
void launch_masked_softmax(const SoftmaxParams& params, DType dtype, void* stream);

// O rows of queries that see no key, after O = P·V: cuBLAS computes 0·V, which is NaN where V
// holds a NaN or an Inf, so those rows are set to 0 explicitly (attnsuite's defined numerics:
// a fully masked row is 0 with LSE −inf, whatever V holds; docs/reliability.md).
struct ZeroRowsParams {
  void* o = nullptr;  // (batch, seq_q, heads_q, dim_v) elements of dtype, strided
  std::int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;  // in elements; dim stride 1
  int batch = 0, heads_q = 0, dim_v = 0;
  int seq_q = 0, seq_kv = 0, window_left = -1, window_right = -1;  // as in SoftmaxParams
};
// The caller launches it only where some query sees no key (AttentionProblem::key_begin/key_end).
void launch_zero_unseen_rows(const ZeroRowsParams& params, DType dtype, void* stream);

}  // namespace attnsuite::cuda::vanilla
