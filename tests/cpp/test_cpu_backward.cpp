// The CPU backward kernels (src/cpu/backward.hpp). The fp64 reference is checked against finite
// differences of an fp64 forward loop written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "cpu/backward.hpp"
#include "cpu/common.hpp"

namespace attnsuite {
namespace {

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
std::int64_t logical(const std::array<std::int64_t, 4>& shape, std::int64_t b, std::int64_t s,
                     std::int64_t h, std::int64_t d) {
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

void write_logical(HostTensor& tensor, const std::vector<double>& values) {
  for_each_index(tensor.view, [&](auto b, auto s, auto h, auto d) {
    store_from_float(tensor.view.data, tensor.view.dtype, tensor.view.offset(b, s, h, d),
                     static_cast<float>(values[static_cast<std::size_t>(
                         logical(tensor.view.shape, b, s, h, d))]));
  });
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

Forward forward_f64(const AttentionProblem& p, const std::vector<double>& q,
                    const std::vector<double>& k, const std::vector<double>& v) {
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
  // O and LSE from the fp64 forward of the current Q, K, V.
  void set_forward() {
    const Forward fwd = forward_f64(p, read_logical(q.view), read_logical(k.view), read_logical(v.view));
    write_logical(o, fwd.o);
    lse.assign(fwd.lse.begin(), fwd.lse.end());
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

AttentionProblem shape(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv, int head_dim,
                       int head_dim_v = 0) {
  AttentionProblem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  return p;
}

AttentionProblem with(AttentionProblem p, bool causal, int window_left = -1, int window_right = -1) {
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  return p;
}

// ---------------------------------------------------------------------------------------------
// The reference against finite differences of L = Σ dO∘O(Q, K, V), the forward in fp64 above.

TEST(CpuBackwardReference, MatchesFiniteDifferences) {
  const AttentionProblem problems[] = {
      shape(1, 2, 1, 4, 5, 4, 3),                   // MQA, dim_v != head_dim, no mask
      with(shape(1, 2, 2, 5, 4, 4, 3), true),       // causal, seq_q > seq_kv: row 0 sees no key
      with(shape(2, 4, 2, 3, 6, 3), true),          // GQA, causal, seq_q < seq_kv
      with(shape(1, 2, 1, 6, 6, 4), false, 2, 1),   // window on both sides
  };
  for (const AttentionProblem& p : problems) {
    SCOPED_TRACE(p.describe());
    BackwardData data = make_data(p, 17);
    const std::vector<double> q = read_logical(data.q.view), k = read_logical(data.k.view),
                              v = read_logical(data.v.view), d_o = read_logical(data.d_o.view);
    const cpu::GradientsF64 grads = cpu::reference_backward_f64(p, data.args(), 2);
    auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk,
                    const std::vector<double>& vv) {
      const Forward fwd = forward_f64(p, qq, kk, vv);
      double sum = 0;
      for (std::size_t n = 0; n < d_o.size(); ++n) sum += d_o[n] * fwd.o[n];
      return sum;
    };
    // Fourth-order central difference: truncation ~h⁴, cancellation ~1e-16·|L|/h.
    const double h = 1e-3;
    auto check = [&](const char* what, const std::vector<double>& base,
                     const std::vector<double>& grad, int which) {
      for (std::size_t n = 0; n < base.size(); ++n) {
        auto at = [&](double offset) {
          std::vector<double> x = base;
          x[n] += offset;
          return which == 0 ? loss(x, k, v) : which == 1 ? loss(q, x, v) : loss(q, k, x);
        };
        const double numeric =
            (8.0 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12.0 * h);
        EXPECT_NEAR(grad[n], numeric, 1e-8 * std::max(1.0, std::abs(numeric)))
            << what << "[" << n << "]";
      }
    };
    check("dq", q, grads.dq, 0);
    check("dk", k, grads.dk, 1);
    check("dv", v, grads.dv, 2);
    // Row 0 of the causal seq_q > seq_kv case sees no key: dq there is exactly 0.
    expect_masked_rows_zero(p, grads.dq);
  }
}

}  // namespace
}  // namespace attnsuite
