// The CPU backward kernels (src/cpu/backward.hpp). The fp64 reference is checked against finite
// differences of an fp64 forward loop written here; every kernel is then checked against the
// reference's gradients with FlashAttention's rule: its max error is at most twice the max error
// of a naive backward in the same dtype (a straight loop here, fp32 math from the rounded
// inputs, outputs rounded to the dtype), plus a floor of a few units in the last place.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "core/peak.hpp"
#include "cpu/backward.hpp"
#include "cpu/common.hpp"
#include "cpu/cpu_backends.hpp"
#include "shape_cases.hpp"

namespace attnsuite {
namespace {

using namespace test_shapes;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// Tensors in either layout. Storage starts as all-ones bytes, a NaN in every dtype.

struct HostTensor {
  std::vector<unsigned char> storage;
  TensorView view;
};

HostTensor make_tensor(std::array<std::int64_t, 4> shape, DType dtype, Layout layout) {
  HostTensor tensor;
  tensor.view.dtype = dtype;
  tensor.view.shape = shape;
  tensor.view.strides = TensorView::dense_strides(shape, layout);
  tensor.storage.assign(static_cast<std::size_t>(tensor.view.numel()) * size_of(dtype), 0xFF);
  tensor.view.data = tensor.storage.data();
  return tensor;
}

template <class F>
void for_each_index(const TensorView& view, F&& body) {
  for (std::int64_t b = 0; b < view.shape[0]; ++b)
    for (std::int64_t s = 0; s < view.shape[1]; ++s)
      for (std::int64_t h = 0; h < view.shape[2]; ++h)
        for (std::int64_t d = 0; d < view.shape[3]; ++d) body(b, s, h, d);
}

// Logical (b, s, h, d) index of a dense vector.
std::int64_t logical(const std::array<std::int64_t, 4>& shape, std::int64_t b, std::int64_t s, std::int64_t h,
                     std::int64_t d) {
  return ((b * shape[1] + s) * shape[2] + h) * shape[3] + d;
}

std::vector<double> read_logical(const TensorView& view) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(view.numel()));
  for_each_index(view, [&](auto b, auto s, auto h, auto d) {
    out.push_back(load_as_float(view.data, view.dtype, view.offset(b, s, h, d)));
  });
  return out;
}

float round_to(DType dtype, double value) {
  std::uint32_t storage = 0;
  store_from_float(&storage, dtype, 0, static_cast<float>(value));
  return load_as_float(&storage, dtype, 0);
}

// ---------------------------------------------------------------------------------------------
// The mask from its definition (bottom-right aligned diagonal), not from key_begin/key_end.

bool visible(const AttentionProblem& p, std::int64_t i, std::int64_t j) {
  const std::int64_t diag = i + p.seq_kv - p.seq_q;
  if (p.causal && j > diag) return false;
  if (p.window_left >= 0 && j < diag - p.window_left) return false;
  if (p.window_right >= 0 && j > diag + p.window_right) return false;
  return true;
}

bool sees_any_key(const AttentionProblem& p, std::int64_t i) {
  for (std::int64_t j = 0; j < p.seq_kv; ++j)
    if (visible(p, i, j)) return true;
  return false;
}

// dQ rows of queries that see no key: exactly 0.
void expect_masked_rows_zero(const AttentionProblem& p, const std::vector<double>& dq) {
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    if (sees_any_key(p, i)) continue;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        for (std::int64_t c = 0; c < p.head_dim; ++c)
          ASSERT_EQ(dq[((b * p.seq_q + i) * p.heads_q + h) * p.head_dim + c], 0.0) << "row " << i << " sees no key";
  }
}

// The problem's scale as the kernels take it (a float).
double scale_of(const AttentionProblem& p) { return p.softmax_scale(); }

std::array<std::int64_t, 4> q_shape(const AttentionProblem& p) { return {p.batch, p.seq_q, p.heads_q, p.head_dim}; }
std::array<std::int64_t, 4> k_shape(const AttentionProblem& p) { return {p.batch, p.seq_kv, p.heads_kv, p.head_dim}; }
std::array<std::int64_t, 4> v_shape(const AttentionProblem& p) { return {p.batch, p.seq_kv, p.heads_kv, p.dim_v()}; }
std::array<std::int64_t, 4> o_shape(const AttentionProblem& p) { return {p.batch, p.seq_q, p.heads_q, p.dim_v()}; }

// The fp64 forward: O (logical order) and LSE ((batch, heads_q, seq_q); -inf for rows that see
// no key).
struct Forward {
  std::vector<double> o, lse;
};

Forward forward_f64(const AttentionProblem& p, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v) {
  const double scale = scale_of(p);
  Forward out;
  out.o.assign(static_cast<std::size_t>(p.batch * p.seq_q * p.heads_q * p.dim_v()), 0.0);
  out.lse.assign(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q), -kInf);
  std::vector<double> scores(static_cast<std::size_t>(p.seq_kv));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const std::int64_t g = p.kv_head_of(static_cast<int>(h));
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        if (!sees_any_key(p, i)) continue;
        double row_max = -kInf;
        for (std::int64_t j = 0; j < p.seq_kv; ++j) {
          if (!visible(p, i, j)) continue;
          double dot = 0;
          for (std::int64_t d = 0; d < p.head_dim; ++d)
            dot += q[logical(q_shape(p), b, i, h, d)] * k[logical(k_shape(p), b, j, g, d)];
          scores[j] = dot * scale;
          row_max = std::max(row_max, scores[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < p.seq_kv; ++j)
          if (visible(p, i, j)) sum += std::exp(scores[j] - row_max);
        for (std::int64_t j = 0; j < p.seq_kv; ++j) {
          if (!visible(p, i, j)) continue;
          const double weight = std::exp(scores[j] - row_max) / sum;
          for (std::int64_t d = 0; d < p.dim_v(); ++d)
            out.o[logical(o_shape(p), b, i, h, d)] += weight * v[logical(v_shape(p), b, j, g, d)];
        }
        out.lse[(b * p.heads_q + h) * p.seq_q + i] = row_max + std::log(sum);
      }
    }
  return out;
}

// ---------------------------------------------------------------------------------------------
// A backward problem's tensors: random Q, K, V, dO; O and LSE from the fp64 forward (O rounded
// to the dtype, LSE to float), as an ideal forward would write them; gradients poisoned (NaN).

struct BackwardData {
  AttentionProblem p;
  HostTensor q, k, v, o, d_o, dq, dk, dv;
  std::vector<float> lse;

  BackwardArgs args() {
    BackwardArgs a;
    a.q = q.view;
    a.k = k.view;
    a.v = v.view;
    a.o = o.view;
    a.d_o = d_o.view;
    a.lse.data = lse.data();
    a.dq = dq.view;
    a.dk = dk.view;
    a.dv = dv.view;
    return a;
  }
  void poison_gradients() {
    for (HostTensor* t : {&dq, &dk, &dv}) std::fill(t->storage.begin(), t->storage.end(), 0xFF);
  }
  // O and LSE from the fp64 forward of the current Q, K, V: the reference's (its loop is checked
  // against one written out in test_cpu_backends.cpp), threaded over (batch, q head).
  void set_forward() {
    AttentionArgs fwd;
    fwd.q = q.view;
    fwd.k = k.view;
    fwd.v = v.view;
    lse.resize(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q));
    cpu::parallel_for(p.batch * p.heads_q, cpu::cpu_threads(), [&](std::int64_t item, int) {
      const int b = static_cast<int>(item / p.heads_q), h = static_cast<int>(item % p.heads_q);
      std::vector<double> out(static_cast<std::size_t>(p.seq_q * p.dim_v())),
          row_lse(static_cast<std::size_t>(p.seq_q));
      cpu::reference_head_f64(p, fwd, b, h, out.data(), row_lse.data());
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        lse[static_cast<std::size_t>(item * p.seq_q + i)] = static_cast<float>(row_lse[static_cast<std::size_t>(i)]);
        for (std::int64_t c = 0; c < p.dim_v(); ++c)
          store_from_float(o.view.data, o.view.dtype, o.view.offset(b, i, h, c),
                           static_cast<float>(out[static_cast<std::size_t>(i * p.dim_v() + c)]));
      }
    });
  }
};

BackwardData make_data(const AttentionProblem& p, std::uint64_t seed) {
  BackwardData data;
  data.p = p;
  data.q = make_tensor(q_shape(p), p.dtype, p.layout);
  data.k = make_tensor(k_shape(p), p.dtype, p.layout);
  data.v = make_tensor(v_shape(p), p.dtype, p.layout);
  data.o = make_tensor(o_shape(p), p.dtype, p.layout);
  data.d_o = make_tensor(o_shape(p), p.dtype, p.layout);
  data.dq = make_tensor(q_shape(p), p.dtype, p.layout);
  data.dk = make_tensor(k_shape(p), p.dtype, p.layout);
  data.dv = make_tensor(v_shape(p), p.dtype, p.layout);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (HostTensor* t : {&data.q, &data.k, &data.v, &data.d_o}) {
    for_each_index(t->view, [&](auto b, auto s, auto h, auto d) {
      store_from_float(t->view.data, t->view.dtype, t->view.offset(b, s, h, d), normal(rng));
    });
  }
  data.set_forward();
  return data;
}

// ---------------------------------------------------------------------------------------------
// The reference against finite differences of L = Σ dO∘O(Q, K, V), the forward in fp64 above.

TEST(CpuBackwardReference, MatchesFiniteDifferences) {
  const AttentionProblem problems[] = {
      shape(1, 2, 1, 4, 5, 4, 3),                  // MQA, dim_v != head_dim, no mask
      with(shape(1, 2, 2, 5, 4, 4, 3), true),      // causal, seq_q > seq_kv: row 0 sees no key
      with(shape(2, 4, 2, 3, 6, 3), true),         // GQA, causal, seq_q < seq_kv
      with(shape(1, 2, 1, 6, 6, 4), false, 2, 1),  // window on both sides
  };
  for (const AttentionProblem& p : problems) {
    SCOPED_TRACE(p.describe());
    BackwardData data = make_data(p, 17);
    const std::vector<double> q = read_logical(data.q.view), k = read_logical(data.k.view),
                              v = read_logical(data.v.view), d_o = read_logical(data.d_o.view);
    const cpu::GradientsF64 grads = cpu::reference_backward_f64(p, data.args(), 2);
    auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
      const Forward fwd = forward_f64(p, qq, kk, vv);
      double sum = 0;
      for (std::size_t n = 0; n < d_o.size(); ++n) sum += d_o[n] * fwd.o[n];
      return sum;
    };
    // Fourth-order central difference: truncation ~h⁴, cancellation ~1e-16·|L|/h.
    const double h = 1e-3;
    auto check = [&](const char* what, const std::vector<double>& base, const std::vector<double>& grad, int which) {
      for (std::size_t n = 0; n < base.size(); ++n) {
        auto at = [&](double offset) {
          std::vector<double> x = base;
          x[n] += offset;
          return which == 0 ? loss(x, k, v) : which == 1 ? loss(q, x, v) : loss(q, k, x);
        };
        const double numeric = (8.0 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12.0 * h);
        EXPECT_NEAR(grad[n], numeric, 1e-8 * std::max(1.0, std::abs(numeric))) << what << "[" << n << "]";
      }
    };
    check("dq", q, grads.dq, 0);
    check("dk", k, grads.dk, 1);
    check("dv", v, grads.dv, 2);
    // Row 0 of the causal seq_q > seq_kv case sees no key: dq there is exactly 0.
    expect_masked_rows_zero(p, grads.dq);
  }
}

// ---------------------------------------------------------------------------------------------
// The naive same-dtype backward: a straight loop in float from the inputs as stored (Q, K, V, dO,
// the given O, the given LSE), P = exp(S − LSE), D = rowsum(dO∘O); gradients rounded to the dtype.
// Beside it, the largest sum of absolute terms of each gradient (dq_i: scale·Σ_j P_ij·(|dP_ij| +
// |D_i|)·|k_j|, ...): dS = P∘(dP − D) cancels, so fp32 rounding is relative to that, not to the
// result (with one key, dS is 0 and every fp32 kernel gets ~1e-7 instead).

struct Naive {
  cpu::GradientsF64 grads;
  double dq_terms = 0, dk_terms = 0, dv_terms = 0;
};

Naive naive_backward_f32(BackwardData& data) {
  const AttentionProblem& p = data.p;
  const std::vector<double> qd = read_logical(data.q.view), kd = read_logical(data.k.view),
                            vd = read_logical(data.v.view), od = read_logical(data.o.view),
                            dod = read_logical(data.d_o.view);
  const std::vector<float> q(qd.begin(), qd.end()), k(kd.begin(), kd.end()), v(vd.begin(), vd.end()),
      o(od.begin(), od.end()), d_o(dod.begin(), dod.end());
  const float scale = p.softmax_scale();
  std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  std::vector<double> dq_terms(q.size(), 0.0), dk_terms(k.size(), 0.0), dv_terms(v.size(), 0.0);
  std::vector<float> probs(static_cast<std::size_t>(p.seq_kv));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const std::int64_t g = p.kv_head_of(static_cast<int>(h));
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        const float lse = data.lse[static_cast<std::size_t>((b * p.heads_q + h) * p.seq_q + i)];
        float row_dot = 0;
        for (std::int64_t c = 0; c < p.dim_v(); ++c)
          row_dot += d_o[logical(o_shape(p), b, i, h, c)] * o[logical(o_shape(p), b, i, h, c)];
        for (std::int64_t j = 0; j < p.seq_kv; ++j) {
          if (!visible(p, i, j)) continue;
          float dot = 0;
          for (std::int64_t c = 0; c < p.head_dim; ++c)
            dot += q[logical(q_shape(p), b, i, h, c)] * k[logical(k_shape(p), b, j, g, c)];
          const float prob = std::exp(dot * scale - lse);
          float dp = 0;
          for (std::int64_t c = 0; c < p.dim_v(); ++c)
            dp += d_o[logical(o_shape(p), b, i, h, c)] * v[logical(v_shape(p), b, j, g, c)];
          const float ds = prob * (dp - row_dot);
          const double ds_terms = static_cast<double>(prob) * (std::abs(dp) + std::abs(row_dot)) * scale;
          for (std::int64_t c = 0; c < p.head_dim; ++c) {
            const std::int64_t qn = logical(q_shape(p), b, i, h, c), kn = logical(k_shape(p), b, j, g, c);
            dq[qn] += ds * scale * k[kn];
            dk[kn] += ds * scale * q[qn];
            dq_terms[qn] += ds_terms * std::abs(k[kn]);
            dk_terms[kn] += ds_terms * std::abs(q[qn]);
          }
          for (std::int64_t c = 0; c < p.dim_v(); ++c) {
            const std::int64_t vn = logical(v_shape(p), b, j, g, c), on = logical(o_shape(p), b, i, h, c);
            dv[vn] += prob * d_o[on];
            dv_terms[vn] += prob * std::abs(d_o[on]);
          }
        }
      }
    }
  auto rounded = [&](const std::vector<float>& values) {
    std::vector<double> out(values.size());
    for (std::size_t n = 0; n < values.size(); ++n) out[n] = round_to(p.dtype, values[n]);
    return out;
  };
  auto largest = [](const std::vector<double>& values) {
    double out = 0;
    for (double value : values) out = std::max(out, value);
    return out;
  };
  return {{rounded(dq), rounded(dk), rounded(dv)}, largest(dq_terms), largest(dk_terms), largest(dv_terms)};
}

// ---------------------------------------------------------------------------------------------
// Errors and FlashAttention's tolerance rule.

struct ErrorStats {
  double max_abs = 0.0;
  double mean_abs = 0.0;
  std::int64_t worst = -1;
  std::int64_t non_finite = 0;
  double max_ref = 0.0;
};

ErrorStats compare(const std::vector<double>& got, const std::vector<double>& ref) {
  ErrorStats stats;
  double total = 0.0;
  for (std::size_t n = 0; n < ref.size(); ++n) {
    if (!std::isfinite(got[n])) {
      ++stats.non_finite;
      continue;
    }
    const double error = std::abs(got[n] - ref[n]);
    if (error > stats.max_abs) {
      stats.max_abs = error;
      stats.worst = static_cast<std::int64_t>(n);
    }
    stats.max_ref = std::max(stats.max_ref, std::abs(ref[n]));
    total += error;
  }
  stats.mean_abs = ref.empty() ? 0.0 : total / static_cast<double>(ref.size());
  return stats;
}

// A few units in the last place of the gradient's dtype at its largest magnitude, plus a few
// fp32 units of the largest sum of absolute terms (every kernel computes in fp32).
double rounding_floor(DType dtype, double max_ref, double max_terms) {
  const int mantissa_bits = dtype == DType::F32 ? 23 : dtype == DType::F16 ? 10 : 7;
  const double output =
      std::ldexp(1.0, static_cast<int>(std::floor(std::log2(std::max(max_ref, 1e-3)))) - mantissa_bits);
  return 4.0 * output + 4.0 * std::numeric_limits<float>::epsilon() * max_terms;
}

void expect_within(const char* what, const std::vector<double>& got, const std::vector<double>& naive,
                   const std::vector<double>& truth, DType dtype, double max_terms) {
  const ErrorStats error = compare(got, truth);
  const ErrorStats baseline = compare(naive, truth);
  const double tolerance = 2.0 * baseline.max_abs + rounding_floor(dtype, error.max_ref, max_terms);
  EXPECT_EQ(error.non_finite, 0) << what << ": " << error.non_finite << " NaN/Inf elements";
  EXPECT_LE(error.max_abs, tolerance) << what << ": max abs error " << error.max_abs << " (element " << error.worst
                                      << " of " << truth.size() << ", reference "
                                      << (error.worst >= 0 ? truth[static_cast<std::size_t>(error.worst)] : 0.0)
                                      << "), mean " << error.mean_abs << "; naive same-dtype max " << baseline.max_abs
                                      << " mean " << baseline.mean_abs << "; tolerance " << tolerance;
}

// ---------------------------------------------------------------------------------------------
// Running the kernels.

using Kernel = std::function<void(const AttentionProblem&, const BackwardArgs&)>;

Kernel kernel_named(const std::string& name, int threads = cpu::cpu_threads()) {
  if (name == "reference")
    return [threads](const AttentionProblem& p, const BackwardArgs& a) { cpu::reference_backward(p, a, threads); };
  if (name == "cpu-vanilla")
    return [threads](const AttentionProblem& p, const BackwardArgs& a) { cpu::vanilla_backward(p, a, threads); };
  return [threads](const AttentionProblem& p, const BackwardArgs& a) { cpu::flash_backward(p, a, threads); };
}

struct Gradients {
  std::vector<double> dq, dk, dv;
};

// Runs a kernel on poisoned (NaN) gradient buffers and reads what it wrote.
Gradients run_kernel(const Kernel& kernel, BackwardData& data) {
  data.poison_gradients();
  kernel(data.p, data.args());
  return {read_logical(data.dq.view), read_logical(data.dk.view), read_logical(data.dv.view)};
}

// What a kernel's gradients are checked against: the fp64 reference and the naive same-dtype loop.
struct Expected {
  cpu::GradientsF64 truth;
  Naive naive;
};

Expected expected_for(BackwardData& data) {
  return {cpu::reference_backward_f64(data.p, data.args(), cpu::cpu_threads()), naive_backward_f32(data)};
}

// Checks a kernel on data (O and LSE already set) against the fp64 reference gradients.
void check_with(const std::string& label, const Kernel& kernel, BackwardData& data, const Expected& expected) {
  const AttentionProblem& p = data.p;
  SCOPED_TRACE(label + " on " + p.describe());
  const Gradients got = run_kernel(kernel, data);
  const Naive& naive = expected.naive;
  expect_within("dQ", got.dq, naive.grads.dq, expected.truth.dq, p.dtype, naive.dq_terms);
  expect_within("dK", got.dk, naive.grads.dk, expected.truth.dk, p.dtype, naive.dk_terms);
  expect_within("dV", got.dv, naive.grads.dv, expected.truth.dv, p.dtype, naive.dv_terms);
  expect_masked_rows_zero(p, got.dq);
}

void check_with(const std::string& label, const Kernel& kernel, BackwardData& data) {
  check_with(label, kernel, data, expected_for(data));
}

void check_kernel(const std::string& name, BackwardData& data, int threads = cpu::cpu_threads()) {
  check_with(name + " on " + std::to_string(threads) + " threads", kernel_named(name, threads), data);
}

// ---------------------------------------------------------------------------------------------
// The cases: every kernel × every shape, both layouts, fp32; 16-bit on a subset.

std::vector<Case> cases() { return shape_cases(); }

struct Param {
  std::string kernel;
  Case entry;
  DType dtype;
  Layout layout;
};

std::vector<Param> params() {
  std::vector<Param> out;
  for (const char* kernel : {"reference", "cpu-vanilla", "cpu-flash"}) {
    // The reference against itself only checks its writing into the views: the short cases do.
    const bool long_cases = std::string(kernel) != "reference";
    for (const Case& c : cases())
      if (long_cases || c.problem.seq_q < 1000)
        for (Layout layout : {Layout::BSHD, Layout::BHSD}) out.push_back({kernel, c, DType::F32, layout});
    for (const char* label :
         {"seq33", "causal_q_gt_kv", "gqa_8_2", "dim40_dv72", "window_masks_rows", "causal_seq1000"})
      for (const Case& c : cases())
        if (c.label == label && (long_cases || c.problem.seq_q < 1000))
          for (DType dtype : {DType::F16, DType::BF16}) out.push_back({kernel, c, dtype, Layout::BSHD});
  }
  return out;
}

void PrintTo(const Param& param, std::ostream* os) {
  AttentionProblem p = param.entry.problem;
  p.dtype = param.dtype;
  p.layout = param.layout;
  *os << param.kernel << " " << p.describe();
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string name = info.param.kernel + "_" + info.param.entry.label + "_" + std::string(to_string(info.param.dtype)) +
                     "_" + std::string(to_string(info.param.layout));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class CpuBackwardAccuracy : public ::testing::TestWithParam<Param> {};

TEST_P(CpuBackwardAccuracy, MatchesFp64Reference) {
  const Param& param = GetParam();
  AttentionProblem p = param.entry.problem;
  p.dtype = param.dtype;
  p.layout = param.layout;
  BackwardData data = make_data(p, 0xbacc + std::hash<std::string>{}(param.entry.label));
  check_kernel(param.kernel, data);
}

INSTANTIATE_TEST_SUITE_P(All, CpuBackwardAccuracy, ::testing::ValuesIn(params()), param_name);

// A long sequence at one head: tile edges, many key tiles, the chunked split (one unit).
TEST(CpuBackward, Seq4097) {
  BackwardData data = make_data(shape(1, 1, 1, 4097, 4097, 64), 4097);
  const Expected expected = expected_for(data);
  for (const char* kernel : {"cpu-vanilla", "cpu-flash"}) check_with(kernel, kernel_named(kernel), data, expected);
}

// Every tile configuration of the flash backward on the odd shapes.
TEST(CpuBackward, EveryFlashConfigMatchesTheReference) {
  const std::vector<std::string> configs = cpu::flash_backward_configs();
  ASSERT_GE(configs.size(), 2u);
  for (const std::string& config : configs) {
    const Kernel kernel = [&config](const AttentionProblem& p, const BackwardArgs& a) {
      cpu::flash_backward(p, a, cpu::cpu_threads(), config);
    };
    for (const char* label :
         {"seq1", "seq33", "causal_q_gt_kv", "gqa_8_2", "window_both", "dim40_dv72", "peaked_scale"})
      for (const Case& c : cases())
        if (c.label == label) {
          BackwardData data = make_data(c.problem, 11);
          check_with("cpu-flash " + config, kernel, data);
        }
  }
}

// ---------------------------------------------------------------------------------------------
// The forward's own O and LSE (reference, cpu-vanilla, cpu-flash) feed the backward.

TEST(CpuBackward, ForwardOutputsFeedTheBackward) {
  AttentionProblem bf16 = with(shape(1, 4, 2, 150, 170, 64), true, 30, 5);
  bf16.dtype = DType::BF16;
  AttentionProblem fp16 = with(shape(2, 2, 2, 130, 60, 64), true);  // rows that see no key
  fp16.dtype = DType::F16;
  const AttentionProblem fp32 = with(shape(1, 8, 2, 300, 300, 64), true);
  for (const AttentionProblem& p : {fp32, bf16, fp16}) {
    for (const char* forward : {"reference", "cpu-vanilla", "cpu-flash"}) {
      Backend& backend = Registry::global().find(forward);
      if (!backend.supports(p).ok) continue;  // cpu-vanilla's forward is fp32 only
      BackwardData data = make_data(p, 23);
      AttentionArgs fwd;
      fwd.q = data.q.view;
      fwd.k = data.k.view;
      fwd.v = data.v.view;
      fwd.o = data.o.view;
      fwd.lse.data = data.lse.data();
      backend.forward(p, fwd, nullptr);
      SCOPED_TRACE(std::string("O and LSE from ") + forward);
      for (const char* kernel : {"cpu-vanilla", "cpu-flash"}) check_kernel(kernel, data);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// NaN in one input element: exactly the gradients whose defining sums include it are NaN.

enum class Input { Q, K, V, dO };

const char* input_name(Input input) {
  switch (input) {
    case Input::Q:
      return "Q";
    case Input::K:
      return "K";
    case Input::V:
      return "V";
    case Input::dO:
      return "dO";
  }
  return "?";
}

struct Position {
  std::int64_t b, s, h, c;  // h: the q head for Q and dO, the kv head for K and V
};

// Which gradient elements mathematically include the NaN, written out from the sums:
//   S_ij = q_i·k_j; a NaN score makes the row's softmax (and LSE) NaN, so P_i· is NaN;
//   dP_ij = dO_i·v_j;  D_i = dO_i·O_i with O_i = Σ_j P_ij v_j;  dS_ij = P_ij (dP_ij − D_i);
//   dq_i = Σ_j dS_ij k_j,  dk_j = Σ_i dS_ij q_i,  dv_j[c] = Σ_i P_ij dO_i[c]  (visible pairs).
Gradients expected_nan(const AttentionProblem& p, Input input, const Position& at) {
  Gradients nan;
  nan.dq.assign(static_cast<std::size_t>(p.batch * p.seq_q * p.heads_q * p.head_dim), 0.0);
  nan.dk.assign(static_cast<std::size_t>(p.batch * p.seq_kv * p.heads_kv * p.head_dim), 0.0);
  nan.dv.assign(static_cast<std::size_t>(p.batch * p.seq_kv * p.heads_kv * p.dim_v()), 0.0);
  const bool on_q_side = input == Input::Q || input == Input::dO;
  const std::int64_t g = on_q_side ? p.kv_head_of(static_cast<int>(at.h)) : at.h;
  for (std::int64_t h = g * p.group_size(); h < (g + 1) * p.group_size(); ++h) {
    for (std::int64_t i = 0; i < p.seq_q; ++i) {
      const bool this_row = on_q_side && h == at.h && i == at.s;
      bool row_p = input == Input::Q && this_row;   // P_i· NaN
      bool row_d = input == Input::dO && this_row;  // D_i NaN (from dO_i)
      for (std::int64_t j = 0; j < p.seq_kv; ++j) {
        if (!visible(p, i, j)) continue;
        if (input == Input::K && j == at.s) row_p = true;
        if (input == Input::V && j == at.s) row_d = true;  // O_i[c] NaN
      }
      row_d = row_d || row_p;
      for (std::int64_t j = 0; j < p.seq_kv; ++j) {
        if (!visible(p, i, j)) continue;
        const bool dp = (input == Input::dO && this_row) || (input == Input::V && j == at.s);
        const bool ds = row_p || row_d || dp;
        if (ds || (input == Input::K && j == at.s))
          for (std::int64_t c = 0; c < p.head_dim; ++c) nan.dq[logical(q_shape(p), at.b, i, h, c)] = 1;
        if (ds || (input == Input::Q && this_row))
          for (std::int64_t c = 0; c < p.head_dim; ++c) nan.dk[logical(k_shape(p), at.b, j, g, c)] = 1;
        for (std::int64_t c = 0; c < p.dim_v(); ++c)
          if (row_p || (input == Input::dO && this_row && c == at.c)) nan.dv[logical(v_shape(p), at.b, j, g, c)] = 1;
      }
    }
  }
  return nan;
}

void put_nan(BackwardData& data, Input input, const Position& at) {
  HostTensor& t = input == Input::Q ? data.q : input == Input::K ? data.k : input == Input::V ? data.v : data.d_o;
  store_from_float(t.view.data, t.view.dtype, t.view.offset(at.b, at.s, at.h, at.c),
                   std::numeric_limits<float>::quiet_NaN());
}

// exact: every gradient the NaN does not reach is bit for bit what it is without the NaN.
// Otherwise those in the NaN's own (batch, kv head) may also be NaN (a hidden pair's 0·NaN inside
// a tile or GEMM); anything else is bit for bit the clean value.
void check_nan(const std::string& kernel_name, const AttentionProblem& p, Input input, const Position& at, bool exact) {
  SCOPED_TRACE(kernel_name + " on " + p.describe() + ", NaN in " + input_name(input));
  const Kernel kernel = kernel_named(kernel_name);
  BackwardData data = make_data(p, 31);
  const Gradients clean = run_kernel(kernel, data);
  put_nan(data, input, at);
  data.set_forward();  // the forward's O and LSE of the NaN input
  const Gradients got = run_kernel(kernel, data);
  const Gradients nan = expected_nan(p, input, at);
  const std::int64_t slice_kv = input == Input::Q || input == Input::dO ? p.kv_head_of(static_cast<int>(at.h)) : at.h;
  std::int64_t reached = 0;
  auto check = [&](const char* what, const std::array<std::int64_t, 4>& shape, const std::vector<double>& values,
                   const std::vector<double>& clean_values, const std::vector<double>& expected, bool q_heads) {
    for_each_index(TensorView{nullptr, DType::F32, {}, shape, {}}, [&](auto b, auto s, auto h, auto c) {
      const std::int64_t n = logical(shape, b, s, h, c);
      const double value = values[static_cast<std::size_t>(n)];
      if (expected[static_cast<std::size_t>(n)] != 0) {
        ++reached;
        ASSERT_TRUE(std::isnan(value)) << what << "[" << b << "][" << s << "][" << h << "][" << c << "] = " << value
                                       << " should include the NaN";
        return;
      }
      const bool same = std::memcmp(&value, &clean_values[static_cast<std::size_t>(n)], sizeof value) == 0;
      const bool in_slice = b == at.b && (q_heads ? p.kv_head_of(static_cast<int>(h)) : h) == slice_kv;
      if (!exact && in_slice && std::isnan(value)) return;
      ASSERT_TRUE(same) << what << "[" << b << "][" << s << "][" << h << "][" << c << "] = " << value
                        << ", without the NaN " << clean_values[static_cast<std::size_t>(n)];
    });
  };
  check("dQ", q_shape(p), got.dq, clean.dq, nan.dq, true);
  check("dK", k_shape(p), got.dk, clean.dk, nan.dk, false);
  check("dV", v_shape(p), got.dv, clean.dv, nan.dv, false);
  EXPECT_GT(reached, 0) << "the NaN reaches no gradient: the case tests nothing";
}

TEST(CpuBackward, NanReachesExactlyTheGradientsThatIncludeIt) {
  const AttentionProblem dense = shape(2, 4, 2, 37, 45, 64);
  const AttentionProblem masked = with(shape(2, 4, 2, 50, 70, 64), true, 30, -1);
  const AttentionProblem masked_rows = with(shape(2, 2, 1, 60, 30, 64), true);  // rows 0..29 see no key
  for (const char* kernel : {"reference", "cpu-vanilla", "cpu-flash"}) {
    for (const AttentionProblem& p : {dense, masked, masked_rows}) {
      for (Input input : {Input::Q, Input::K, Input::V, Input::dO}) {
        const bool kv = input == Input::K || input == Input::V;
        const Position at = kv ? Position{p.batch - 1, p.seq_kv / 3, p.heads_kv - 1, 3}
                               : Position{p.batch - 1, 2 * p.seq_q / 3, p.heads_q - 1, 9};
        const bool exact = std::string(kernel) == "reference" || !p.has_mask() || input == Input::V;
        check_nan(kernel, p, input, at, exact);
      }
    }
  }
}

// NaN in K and V at every third key and in the queries of rows that see no key: those rows
// still get dQ = 0 exactly (0·NaN in a product over hidden keys must not reach them).
TEST(CpuBackward, RowsThatSeeNoKeyGiveZeroGradients) {
  AttentionProblem p = with(shape(1, 2, 2, 90, 40, 64), true, 7, 0);
  for (const char* kernel : {"reference", "cpu-vanilla", "cpu-flash"}) {
    BackwardData data = make_data(p, 5);
    for (std::int64_t j = 0; j < p.seq_kv; j += 3) {
      put_nan(data, Input::K, {0, j, 1, j % p.head_dim});
      put_nan(data, Input::V, {0, j, 0, j % p.dim_v()});
    }
    for (std::int64_t i = 0; i < p.seq_q; ++i)
      if (!sees_any_key(p, i)) put_nan(data, Input::Q, {0, i, 0, i % p.head_dim});
    data.set_forward();
    const Gradients got = run_kernel(kernel_named(kernel), data);
    SCOPED_TRACE(kernel);
    expect_masked_rows_zero(p, got.dq);
  }
}

// ---------------------------------------------------------------------------------------------

std::vector<unsigned char> gradient_bytes(BackwardData& data, const Kernel& kernel) {
  data.poison_gradients();
  kernel(data.p, data.args());
  std::vector<unsigned char> bytes;
  for (HostTensor* t : {&data.dq, &data.dk, &data.dv}) bytes.insert(bytes.end(), t->storage.begin(), t->storage.end());
  return bytes;
}

TEST(CpuBackward, FlashIsDeterministic) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    // batch × heads_kv = 4 units: the same bits on 1 to 4 threads.
    AttentionProblem p = with(shape(2, 4, 2, 333, 400, 64), true);
    p.dtype = dtype;
    BackwardData data = make_data(p, 5);
    const std::vector<unsigned char> one = gradient_bytes(data, kernel_named("cpu-flash", 1));
    for (int threads : {1, 2, 3, 4})
      EXPECT_EQ(gradient_bytes(data, kernel_named("cpu-flash", threads)), one) << threads << " threads";
    // One unit on 3 threads: chunks of keys, the same bits run after run.
    AttentionProblem mqa = with(shape(1, 4, 1, 500, 700, 64), true);
    mqa.dtype = dtype;
    BackwardData chunked = make_data(mqa, 6);
    const std::vector<unsigned char> first = gradient_bytes(chunked, kernel_named("cpu-flash", 3));
    EXPECT_EQ(gradient_bytes(chunked, kernel_named("cpu-flash", 3)), first);
  }
}

// Fewer units than threads: the key range is split in chunks whose dQ parts are summed.
TEST(CpuBackward, FlashChunkedKeysMatchTheReference) {
  for (int threads : {3, 7}) {
    for (AttentionProblem p : {with(shape(1, 4, 1, 500, 700, 64), true), shape(1, 2, 2, 300, 150, 64),
                               with(shape(1, 1, 1, 400, 200, 64), true, 50, 10)}) {
      BackwardData data = make_data(p, 8);
      check_kernel("cpu-flash", data, threads);
    }
  }
}

TEST(CpuBackward, ReferenceDoesNotDependOnThreadsAndMatchesItsSlices) {
  const AttentionProblem p = with(shape(2, 4, 2, 40, 50, 64, 32), true, 10, 0);
  BackwardData data = make_data(p, 3);
  const cpu::GradientsF64 one = cpu::reference_backward_f64(p, data.args(), 1);
  const cpu::GradientsF64 three = cpu::reference_backward_f64(p, data.args(), 3);
  EXPECT_EQ(one.dq, three.dq);
  EXPECT_EQ(one.dk, three.dk);
  EXPECT_EQ(one.dv, three.dv);
  const int group = p.group_size();
  std::vector<double> dq(static_cast<std::size_t>(group * p.seq_q * p.head_dim));
  std::vector<double> dk(static_cast<std::size_t>(p.seq_kv * p.head_dim)),
      dv(static_cast<std::size_t>(p.seq_kv * p.dim_v()));
  cpu::reference_backward_kv_head_f64(p, data.args(), 1, 1, dq.data(), dk.data(), dv.data());
  for (int member = 0; member < group; ++member)
    for (std::int64_t i = 0; i < p.seq_q; ++i)
      for (std::int64_t c = 0; c < p.head_dim; ++c)
        EXPECT_EQ(dq[static_cast<std::size_t>((member * p.seq_q + i) * p.head_dim + c)],
                  one.dq[logical(q_shape(p), 1, i, group + member, c)]);
  for (std::int64_t j = 0; j < p.seq_kv; ++j) {
    for (std::int64_t c = 0; c < p.head_dim; ++c)
      EXPECT_EQ(dk[static_cast<std::size_t>(j * p.head_dim + c)], one.dk[logical(k_shape(p), 1, j, 1, c)]);
    for (std::int64_t c = 0; c < p.dim_v(); ++c)
      EXPECT_EQ(dv[static_cast<std::size_t>(j * p.dim_v() + c)], one.dv[logical(v_shape(p), 1, j, 1, c)]);
  }
}

// The bench's lone-slice reference: a head's query rows in chunks on several threads gives dQ
// bitwise and dK, dV within rounding of the one-thread sums (their parts are added in chunk order),
// causal with a window and GQA included; fewer rows than a chunk's minimum stay one chunk.
TEST(CpuBackward, ReferenceSliceOnThreadsMatchesOneThread) {
  for (const AttentionProblem& p : {with(shape(1, 4, 2, 300, 260, 64, 32), true, 40, 0), shape(1, 2, 2, 257, 257, 64),
                                    shape(1, 2, 1, 33, 70, 64)}) {
    SCOPED_TRACE(p.describe());
    BackwardData data = make_data(p, 5);
    const std::size_t dq_size = static_cast<std::size_t>(p.group_size() * p.seq_q * p.head_dim);
    const std::size_t dk_size = static_cast<std::size_t>(p.seq_kv * p.head_dim);
    const std::size_t dv_size = static_cast<std::size_t>(p.seq_kv * p.dim_v());
    std::vector<double> dq1(dq_size), dk1(dk_size), dv1(dv_size), dq4(dq_size), dk4(dk_size), dv4(dv_size);
    cpu::reference_backward_kv_head_f64(p, data.args(), 0, p.heads_kv - 1, dq1.data(), dk1.data(), dv1.data(), 1);
    std::fill(dq4.begin(), dq4.end(), std::nan(""));
    std::fill(dk4.begin(), dk4.end(), std::nan(""));
    std::fill(dv4.begin(), dv4.end(), std::nan(""));
    cpu::reference_backward_kv_head_f64(p, data.args(), 0, p.heads_kv - 1, dq4.data(), dk4.data(), dv4.data(), 4);
    EXPECT_EQ(dq1, dq4);
    const auto close = [](const std::vector<double>& a, const std::vector<double>& b) {
      double worst = 0.0, largest = 0.0;
      for (std::size_t n = 0; n < a.size(); ++n) {
        EXPECT_FALSE(std::isnan(b[n])) << n;
        worst = std::max(worst, std::abs(a[n] - b[n]));
        largest = std::max(largest, std::abs(a[n]));
      }
      EXPECT_GT(largest, 0.0);
      EXPECT_LE(worst, 1e-12 * largest);
    };
    close(dk1, dk4);
    close(dv1, dv4);
  }
}

TEST(CpuBackward, RejectsMismatchedArguments) {
  const AttentionProblem p = shape(1, 2, 2, 16, 16, 64);
  for (const char* name : {"reference", "cpu-vanilla", "cpu-flash"}) {
    SCOPED_TRACE(name);
    const Kernel kernel = kernel_named(name);
    BackwardData data = make_data(p, 1);
    AttentionProblem longer = p;
    longer.seq_q = 17;  // the views say 16
    EXPECT_THROW(kernel(longer, data.args()), Error);
    BackwardArgs no_dk = data.args();
    no_dk.dk = {};
    EXPECT_THROW(kernel(p, no_dk), Error);
    BackwardArgs wide_dq = data.args();
    wide_dq.dq.shape[3] = 32;
    EXPECT_THROW(kernel(p, wide_dq), Error);
  }
  BackwardData data = make_data(p, 1);
  BackwardArgs no_lse = data.args();
  no_lse.lse = {};
  for (const char* name : {"cpu-vanilla", "cpu-flash"}) {
    try {
      kernel_named(name)(p, no_lse);
      ADD_FAILURE() << name << " ran without the LSE";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("lse is missing"), std::string::npos) << error.what();
    }
    AttentionProblem small = shape(1, 2, 2, 16, 16, 16);
    BackwardData small_data = make_data(small, 1);
    EXPECT_THROW(kernel_named(name)(small, small_data.args()), Error) << "head dim 16";
  }
  try {
    cpu::flash_backward(p, data.args(), 1, "q7-k7");
    ADD_FAILURE() << "unknown config accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("allowed: q96-k96"), std::string::npos) << error.what();
  }
}

// Peak tracked bytes of one call beyond what was allocated before it.
std::size_t peak_extra_bytes(const Kernel& kernel, BackwardData& data) {
  MemoryTracker& tracker = MemoryTracker::for_device(DeviceType::Cpu);
  const std::size_t before = tracker.current();
  tracker.reset_peak();
  kernel(data.p, data.args());
  return tracker.peak() - before;
}

TEST(CpuBackward, FlashMemoryIsLinearVanillaIsQuadratic) {
  std::size_t flash_extra[2] = {0, 0};
  int index = 0;
  for (std::size_t seq : {1024, 2048}) {
    BackwardData data = make_data(shape(1, 2, 2, static_cast<int>(seq), static_cast<int>(seq), 64), 9);
    const std::size_t vanilla = peak_extra_bytes(kernel_named("cpu-vanilla"), data);
    const std::size_t flash = peak_extra_bytes(kernel_named("cpu-flash"), data);
    const std::size_t scores = 2 * seq * seq * sizeof(float);  // P and dP of one head
    EXPECT_GE(vanilla, scores) << "seq " << seq;
    EXPECT_GT(flash, 0u) << "cpu-flash allocates through HostBuffer";
    // Per thread: tiles (~0.2 MiB at q96-k96) and one q head's Q, dO and dQ in fp32
    // (3·seq·64·4 B); for all: the rows' LSE and D (heads·seq·8 B).
    const std::size_t threads = static_cast<std::size_t>(cpu::cpu_threads());
    EXPECT_LE(flash, threads * ((std::size_t{512} << 10) + 3 * seq * 64 * 4) + 2 * seq * 8)
        << "flash " << flash << " B on " << threads << " threads";
    flash_extra[index++] = flash;
  }
  EXPECT_LE(flash_extra[1], 2 * flash_extra[0]) << "flash's extra memory grows at most linearly";
}

// Timing of the flash and vanilla backward (not a test: run with
// --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Timing*'). Default case: N = 2048,
// 16 heads, d 64, fp32, batch 1, non-causal. Environment: ATTNSUITE_BWD_SEQ, _HEADS, _CAUSAL=1,
// _REPS (per kernel and round, default 5), _ROUNDS (default 3), _CONFIG (a flash tile config),
// _ONLY=<kernel>, _THREADS (the kernels' threads; OpenBLAS keeps its own). Each round measures the FMA peak, then both
// kernels back to back; the machine is shared, so compare rounds whose peak is near the quiet figure.
int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

TEST(CpuBackwardBench, DISABLED_Timing) {
  const int seq = env_int("ATTNSUITE_BWD_SEQ", 2048), heads = env_int("ATTNSUITE_BWD_HEADS", 16);
  const int reps = env_int("ATTNSUITE_BWD_REPS", 5), rounds = env_int("ATTNSUITE_BWD_ROUNDS", 3);
  const char* config = std::getenv("ATTNSUITE_BWD_CONFIG");
  const char* only = std::getenv("ATTNSUITE_BWD_ONLY");
  const int threads = env_int("ATTNSUITE_BWD_THREADS", cpu::cpu_threads());
  AttentionProblem p = shape(1, heads, heads, seq, seq, 64);
  p.causal = env_int("ATTNSUITE_BWD_CAUSAL", 0) != 0;
  BackwardData data;
  data.p = p;
  for (auto [tensor, shape_of] : {std::pair{&data.q, q_shape(p)},
                                  {&data.k, k_shape(p)},
                                  {&data.v, v_shape(p)},
                                  {&data.o, o_shape(p)},
                                  {&data.d_o, o_shape(p)},
                                  {&data.dq, q_shape(p)},
                                  {&data.dk, k_shape(p)},
                                  {&data.dv, v_shape(p)}})
    *tensor = make_tensor(shape_of, p.dtype, p.layout);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (HostTensor* t : {&data.q, &data.k, &data.v, &data.d_o}) {
    auto* values = reinterpret_cast<float*>(t->storage.data());
    for (std::int64_t n = 0; n < t->view.numel(); ++n) values[n] = normal(rng);
  }
  data.lse.assign(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q), 0.0f);
  AttentionArgs fwd{data.q.view, data.k.view, data.v.view, data.o.view, {data.lse.data(), {}}, nullptr};
  Registry::global().find("cpu-flash").forward(p, fwd, nullptr);

  std::vector<std::pair<std::string, Kernel>> kernels;
  for (const char* name : {"cpu-vanilla", "cpu-flash"}) {
    if (only != nullptr && std::string(only) != name) continue;
    if (std::string(name) == "cpu-flash" && config != nullptr) {
      kernels.emplace_back(name, [config, threads](const AttentionProblem& pp, const BackwardArgs& a) {
        cpu::flash_backward(pp, a, threads, config);
      });
    } else {
      kernels.emplace_back(name, kernel_named(name, threads));
    }
  }
  std::printf("%s, backward = 2.5 x forward FLOPs = %.2f GFLOP, %d threads\n", p.describe().c_str(),
              2.5 * p.flops() * 1e-9, threads);
  for (auto& [name, kernel] : kernels) {
    const std::size_t memory = peak_extra_bytes(kernel, data);  // also the warm-up
    std::printf("%-12s extra memory %.2f MiB\n", name.c_str(), static_cast<double>(memory) / (1 << 20));
  }
  // Wall time, and the process's CPU time (both cores; it includes OpenBLAS's spinning).
  auto cpu_ms = [] {
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) * 1e-6;
  };
  for (int round = 0; round < rounds; ++round) {
    const double peak = cpu::measure_fp32_fma_peak_gflops();
    std::printf("round %d: FMA peak %.0f GFLOP/s", round, peak);
    std::vector<double> medians;
    for (auto& [name, kernel] : kernels) {
      std::vector<double> ms, cpu;
      for (int r = 0; r < reps; ++r) {
        const double cpu_start = cpu_ms();
        const auto start = std::chrono::steady_clock::now();
        kernel(p, data.args());
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        cpu.push_back(cpu_ms() - cpu_start);
      }
      const double median = median_of(ms);
      medians.push_back(median);
      std::printf("; %s median %.1f ms (min %.1f, %.0f GFLOP/s, %.0f%% of peak, CPU %.0f ms)", name.c_str(), median,
                  *std::min_element(ms.begin(), ms.end()), 2.5 * p.flops() / (median * 1e6),
                  100.0 * 2.5 * p.flops() / (median * 1e6) / peak, median_of(cpu));
    }
    if (medians.size() == 2) std::printf("; vanilla / flash %.2fx", medians[0] / medians[1]);
    std::printf("\n");
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace attnsuite
