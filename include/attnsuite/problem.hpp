// The shape and semantics of one attention forward, without any pointers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "attnsuite/dtype.hpp"
#include "attnsuite/tensor.hpp"

namespace attnsuite {

struct AttentionProblem {
  int batch = 1;
  int heads_q = 1;
  int heads_kv = 1;  // heads_q % heads_kv == 0: GQA (1 < heads_kv < heads_q) and MQA (heads_kv == 1)
  int seq_q = 1;
  int seq_kv = 1;
  int head_dim = 64;
  int head_dim_v = 0;        // 0 means head_dim
  DType dtype = DType::F32;  // of Q, K, V; O is output_dtype()
  Layout layout = Layout::BSHD;
  // Causal masking is bottom-right aligned, as in FlashAttention 2.1+: query i sees key j when
  // j <= i + (seq_kv - seq_q). A sliding window keeps keys with
  // i + (seq_kv - seq_q) - window_left <= j <= i + (seq_kv - seq_q) + window_right;
  // -1 means unbounded on that side. Rows that see no key produce O = 0 and LSE = -inf.
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float scale = 0.0f;  // 0 means 1/sqrt(head_dim)

  int dim_v() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  // The dtype of O (and of dO, dQ, dK, dV for the 16- and 32-bit dtypes): attnsuite::output_dtype(dtype).
  DType output_dtype() const { return attnsuite::output_dtype(dtype); }
  float softmax_scale() const;
  int group_size() const { return heads_q / heads_kv; }
  int kv_head_of(int q_head) const { return q_head / group_size(); }
  bool has_mask() const { return causal || window_left >= 0 || window_right >= 0; }
  // The window's right bound with causal folded in: min(window_right, 0) when causal (0 without
  // a window), else window_right (-1: unbounded). The mask is then [diag − window_left, diag +
  // right_bound()] with diag = i + seq_kv − seq_q.
  int right_bound() const { return causal ? (window_right >= 0 ? std::min(window_right, 0) : 0) : window_right; }

  // Half-open range [begin, end) of keys that query row i attends to (empty when begin >= end).
  std::int64_t key_begin(std::int64_t i) const {
    const std::int64_t diag = i + (seq_kv - seq_q);
    return window_left >= 0 ? std::max<std::int64_t>(0, diag - window_left) : 0;
  }
  std::int64_t key_end(std::int64_t i) const {
    const std::int64_t diag = i + (seq_kv - seq_q);
    std::int64_t end = seq_kv;
    if (causal) end = std::min<std::int64_t>(end, diag + 1);
    if (window_right >= 0) end = std::min<std::int64_t>(end, diag + window_right + 1);
    return std::max<std::int64_t>(end, 0);
  }

  // Number of (query, key) pairs that are computed: B·Hq·Σ_i |keys(i)|.
  double attended_pairs() const;
  // FlashAttention's FLOP convention: 4·B·Hq·Nq·Nk·D for the dense forward, halved for causal
  // with seq_q == seq_kv. For windows and other masks we count the attended pairs exactly:
  // 2·pairs·(D + Dv).
  double flops() const;
  // Fewest bytes a forward must move: Q, K, V read once (in dtype), O written once (in
  // output_dtype()).
  double min_bytes() const;

  // Throws Error(Usage) with one line naming the bad value and what is allowed.
  void validate() const;

  std::string describe() const;  // "B=2 Hq=16 Hkv=16 Nq=1024 Nk=1024 D=64 fp16 causal"

  friend bool operator==(const AttentionProblem&, const AttentionProblem&) = default;
};

}  // namespace attnsuite
