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

}  // namespace attnsuite::cuda::vanilla
