#include "attnsuite/problem.hpp"

#include <fmt/format.h>

#include <cmath>

#include "attnsuite/error.hpp"

namespace attnsuite {

float AttentionProblem::softmax_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

double AttentionProblem::attended_pairs() const {
  double per_head = 0.0;
  if (!has_mask()) {
    per_head = static_cast<double>(seq_q) * static_cast<double>(seq_kv);
  } else {
    for (std::int64_t i = 0; i < seq_q; ++i) {
      const std::int64_t count = key_end(i) - key_begin(i);
      if (count > 0) per_head += static_cast<double>(count);
    }
  }
  return per_head * batch * heads_q;
}

double AttentionProblem::flops() const {
  // In double: head_dim + head_dim_v alone overflows int at 2^30 each (found by fuzz_problem).
  const double dims = static_cast<double>(head_dim) + dim_v();
  const double dense = 2.0 * batch * heads_q * static_cast<double>(seq_q) * seq_kv * dims;
  if (!has_mask()) return dense;
  // FlashAttention's convention for plain causal self-attention: exactly half the dense count.
  if (causal && window_left < 0 && window_right < 0 && seq_q == seq_kv) return dense / 2.0;
  return 2.0 * attended_pairs() * dims;
}

double AttentionProblem::min_bytes() const {
  const double element = static_cast<double>(size_of(dtype));
  const double out_element = static_cast<double>(size_of(output_dtype()));
  const double q = static_cast<double>(batch) * heads_q * seq_q * head_dim;
  const double k = static_cast<double>(batch) * heads_kv * seq_kv * head_dim;
  const double v = static_cast<double>(batch) * heads_kv * seq_kv * dim_v();
  const double o = static_cast<double>(batch) * heads_q * seq_q * dim_v();
  return element * (q + k + v) + out_element * o;
}

void AttentionProblem::validate() const {
  // Sizes beyond these cannot be indexed by the 32-bit shape fields of the kernels' params.
  static constexpr int kMaxDim = 1 << 30;
  auto positive = [](const char* what, int value) {
    ATTNSUITE_REQUIRE(value > 0 && value <= kMaxDim,
                      fmt::format("{} = {} is not allowed: it must be between 1 and {}", what, value, kMaxDim));
  };
  positive("batch", batch);
  positive("heads_q", heads_q);
  positive("heads_kv", heads_kv);
  positive("seq_q", seq_q);
  positive("seq_kv", seq_kv);
  positive("head_dim", head_dim);
  ATTNSUITE_REQUIRE(head_dim_v >= 0 && head_dim_v <= kMaxDim,
                    fmt::format("head_dim_v = {} is not allowed: 0 (same as head_dim) or a positive size", head_dim_v));
  // Element counts of Q, K, V and O: each must fit the backends' 64-bit element offsets and be
  // exact in a double (the FLOP and byte models), so at most 2^53. Each size alone is at most
  // 2^30, so these products are exact enough in double and cannot overflow it.
  static constexpr double kMaxElements = 9007199254740992.0;  // 2^53
  auto elements = [](const char* what, const char* formula, double count) {
    ATTNSUITE_REQUIRE(count <= kMaxElements,
                      fmt::format("the problem is too large: {} would hold {:.3g} elements ({}); at most 2^53", what,
                                  count, formula));
  };
  const double dv = static_cast<double>(dim_v());
  elements("Q", "batch × seq_q × heads_q × head_dim", static_cast<double>(batch) * seq_q * heads_q * head_dim);
  elements("K", "batch × seq_kv × heads_kv × head_dim", static_cast<double>(batch) * seq_kv * heads_kv * head_dim);
  elements("V", "batch × seq_kv × heads_kv × head_dim_v", static_cast<double>(batch) * seq_kv * heads_kv * dv);
  elements("O", "batch × seq_q × heads_q × head_dim_v", static_cast<double>(batch) * seq_q * heads_q * dv);
  ATTNSUITE_REQUIRE(heads_q % heads_kv == 0,
                    fmt::format("heads_q = {} is not divisible by heads_kv = {}: GQA/MQA needs "
                                "heads_q to be a multiple of heads_kv",
                                heads_q, heads_kv));
  ATTNSUITE_REQUIRE(
      window_left >= -1 && window_right >= -1,
      fmt::format("window ({}, {}) is not allowed: each side is -1 (unbounded) or >= 0", window_left, window_right));
  ATTNSUITE_REQUIRE(std::isfinite(scale) && scale >= 0.0f,
                    fmt::format("scale = {} is not allowed: 0 (default 1/sqrt(head_dim)) or a "
                                "positive finite number",
                                scale));
}

std::string AttentionProblem::describe() const {
  std::string text =
      fmt::format("B={} Hq={} Hkv={} Nq={} Nk={} D={}", batch, heads_q, heads_kv, seq_q, seq_kv, head_dim);
  if (head_dim_v > 0 && head_dim_v != head_dim) text += fmt::format(" Dv={}", head_dim_v);
  text += fmt::format(" {} {}", to_string(dtype), to_string(layout));
  if (causal) text += " causal";
  if (window_left >= 0 || window_right >= 0) text += fmt::format(" window=({},{})", window_left, window_right);
  return text;
}

}  // namespace attnsuite
