// Test support for the GPU backward tests (test_peers.cpp, test_cuda_flash{2,3}_backward.cpp):
// running a plan's forward and backward as the harness's bwd pass does, the fp64 reference
// gradients, and FlashAttention's bound: at most twice the error of a naive same-dtype backward plus a floor.
// The naive one is what the flash-style kernels compute: fp32 scores, softmax and accumulation
// from the inputs as stored, with the operands of the gradient GEMMs (P for dV, dS for dQ and
// dK) rounded to the dtype, and the gradients rounded. Its O and LSE come from the naive
// same-dtype forward. The floor: a few ulps of the dtype at the gradient's largest value, plus a
// few fp32 ulps of its largest sum of absolute terms (dS = P∘(dP − D) cancels).
#pragma once

#if ATTNSUITE_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/device_context.hpp"
#include "cpu/backward.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite::testing_support {

// Gradients in logical (batch, seq, heads, dim) order: dq like q, dk like k, dv like v.
struct Gradients {
  std::vector<double> dq, dk, dv;
};

// A gradient's 16-bit values in logical order, read from the device through its view's strides.
inline std::vector<std::uint16_t> read_logical_bits(bench::DeviceContext* context, const TensorView& view) {
  std::int64_t span = 1;
  for (int dim = 0; dim < 4; ++dim) span += (view.shape[dim] - 1) * view.strides[dim];
  std::vector<std::uint16_t> stored(static_cast<std::size_t>(span));
  context->copy_to_host(stored.data(), view.data, stored.size() * 2);
  std::vector<std::uint16_t> logical;
  logical.reserve(static_cast<std::size_t>(view.numel()));
  for (std::int64_t b = 0; b < view.shape[0]; ++b)
    for (std::int64_t s = 0; s < view.shape[1]; ++s)
      for (std::int64_t h = 0; h < view.shape[2]; ++h)
        for (std::int64_t d = 0; d < view.shape[3]; ++d)
          logical.push_back(stored[static_cast<std::size_t>(view.offset(b, s, h, d))]);
  return logical;
}

inline std::vector<double> as_values(const std::vector<std::uint16_t>& bits, DType dtype) {
  std::vector<double> values(bits.size());
  for (std::size_t n = 0; n < bits.size(); ++n)
    values[n] = load_as_float(bits.data(), dtype, static_cast<std::int64_t>(n));
  return values;
}

// dO: N(0, 1) values rounded to the dtype, (batch, seq_q, heads_q, dim_v) in the problem's layout.
inline HostTensor random_output_gradient(const AttentionProblem& p, std::uint64_t seed) {
  HostTensor d_o({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& value : d_o.bits)
    value = p.dtype == DType::F16 ? float_to_fp16_bits(normal(rng)) : float_to_bf16_bits(normal(rng));
  return d_o;
}

// What one forward and the backward runs after it returned: each backward's dQ, dK, dV bits.
struct BackwardRuns {
  std::vector<std::array<std::vector<std::uint16_t>, 3>> bits;
  std::size_t own_peak = 0;  // RunReport::own_peak_memory_bytes of the first backward
};

// Runs `plan` as the harness's bwd pass does: one forward (O and LSE poisoned where they are
// ours), then `backward_runs` backwards from its saved outputs into poisoned dQ, dK, dV (or the
// peer's own), each read back before the next.
inline BackwardRuns run_backward_on_device(bench::DeviceContext* context, KernelPlan& plan, const AttentionProblem& p,
                                           const Inputs& in, const HostTensor& d_o_host, int backward_runs = 1) {
  const Device device = context->device();
  auto upload = [&](const HostTensor& host) {
    auto buffer = context->allocate(host.bytes());
    context->copy_to_device(buffer->data(), host.bits.data(), host.bytes());
    return buffer;
  };
  auto view = [&](void* data, const HostTensor& t) { return TensorView{data, p.dtype, device, t.shape, t.strides}; };
  auto q = upload(in.q), k = upload(in.k), v = upload(in.v), d_o = upload(d_o_host);
  AttentionArgs args;
  args.q = view(q->data(), in.q);
  args.k = view(k->data(), in.k);
  args.v = view(v->data(), in.v);

  const bool own_output = plan.produces_own_output();
  const HostTensor o_layout({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  const std::size_t lse_bytes = sizeof(float) * p.batch * p.heads_q * p.seq_q;
  std::unique_ptr<bench::DeviceAllocation> o, lse, workspace, backward_workspace;
  if (!own_output) {
    o = context->allocate(o_layout.bytes());
    lse = context->allocate(lse_bytes);
    context->poison(o->data(), o_layout.bytes());
    context->poison(lse->data(), lse_bytes);
    args.o = view(o->data(), o_layout);
    args.lse = LseView{static_cast<float*>(lse->data()), device};
  }
  if (const std::size_t bytes = plan.workspace_bytes(); bytes > 0) {
    workspace = context->allocate(bytes);
    args.workspace = workspace->data();
  }
  context->synchronize();
  const RunReport forward = plan.forward(args, context->stream());
  context->synchronize();

  BackwardArgs bargs;
  bargs.q = args.q;
  bargs.k = args.k;
  bargs.v = args.v;
  bargs.o = own_output ? forward.output : args.o;
  bargs.lse = own_output ? forward.output_lse : args.lse;
  bargs.d_o = view(d_o->data(), d_o_host);
  std::unique_ptr<bench::DeviceAllocation> gradients[3];
  if (!own_output) {
    const HostTensor* likes[3] = {&in.q, &in.k, &in.v};
    TensorView* views[3] = {&bargs.dq, &bargs.dk, &bargs.dv};
    for (int g = 0; g < 3; ++g) {
      gradients[g] = context->allocate(likes[g]->bytes());
      *views[g] = view(gradients[g]->data(), *likes[g]);
    }
  }
  if (const std::size_t bytes = plan.backward_workspace_bytes(); bytes > 0) {
    backward_workspace = context->allocate(bytes);
    bargs.workspace = backward_workspace->data();
  }
  BackwardRuns runs;
  for (int run = 0; run < backward_runs; ++run) {
    if (!own_output)
      for (int g = 0; g < 3; ++g) context->poison(gradients[g]->data(), (g == 0 ? in.q : g == 1 ? in.k : in.v).bytes());
    context->synchronize();
    const RunReport report = plan.backward(bargs, context->stream());
    context->synchronize();
    if (run == 0) runs.own_peak = report.own_peak_memory_bytes;
    const TensorView got[3] = {own_output ? report.output_dq : bargs.dq, own_output ? report.output_dk : bargs.dk,
                               own_output ? report.output_dv : bargs.dv};
    const HostTensor* likes[3] = {&in.q, &in.k, &in.v};
    std::array<std::vector<std::uint16_t>, 3> bits;
    for (int g = 0; g < 3; ++g) {
      EXPECT_EQ(got[g].dtype, p.dtype) << "gradient " << g;
      EXPECT_EQ(got[g].shape, likes[g]->shape) << "gradient " << g;
      if (got[g].empty() || got[g].shape != likes[g]->shape) return runs;
      bits[g] = read_logical_bits(context, got[g]);
    }
    runs.bits.push_back(std::move(bits));
  }
  return runs;
}

// The fp64 reference backward of the same (16-bit) inputs and dO.
inline cpu::GradientsF64 reference_gradients(const AttentionProblem& p, const Inputs& in, const HostTensor& d_o) {
  auto view = [&](const HostTensor& t) {
    return TensorView{const_cast<std::uint16_t*>(t.bits.data()), p.dtype, Device{DeviceType::Cpu, 0}, t.shape,
                      t.strides};
  };
  BackwardArgs args;
  args.q = view(in.q);
  args.k = view(in.k);
  args.v = view(in.v);
  args.d_o = view(d_o);
  return cpu::reference_backward_f64(p, args, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

// The naive same-dtype backward (see the top of the file), and per gradient the largest sum of
// absolute terms its elements add up.
struct NaiveBackward {
  Gradients grads;
  double terms[3] = {0, 0, 0};  // dq, dk, dv
};

inline NaiveBackward naive_backward_same_dtype(const AttentionProblem& p, const Inputs& in, const HostTensor& d_o) {
  const Result forward = naive_same_dtype(p, in, /*round_scores=*/false);
  const std::int64_t nq = p.seq_q, nk = p.seq_kv, hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim, dv = p.dim_v();
  const int group = p.group_size();
  const float scale = p.softmax_scale();
  NaiveBackward out;
  out.grads.dq.assign(static_cast<std::size_t>(p.batch * nq * hq * d), 0.0);
  out.grads.dk.assign(static_cast<std::size_t>(p.batch * nk * hkv * d), 0.0);
  out.grads.dv.assign(static_cast<std::size_t>(p.batch * nk * hkv * dv), 0.0);
  std::vector<std::array<double, 3>> item_terms(static_cast<std::size_t>(p.batch * hkv));
  // One item per (batch, kv head): it alone writes its kv head's dK, dV and its group's dQ rows.
  parallel_rows(p.batch * hkv, [&](std::int64_t item) {
    const std::int64_t b = item / hkv, g = item % hkv;
    std::vector<float> dk(static_cast<std::size_t>(nk * d), 0.0f), dv_acc(static_cast<std::size_t>(nk * dv), 0.0f);
    std::vector<double> dk_terms(dk.size(), 0.0), dv_terms(dv_acc.size(), 0.0);
    std::array<double, 3>& terms = item_terms[static_cast<std::size_t>(item)];
    for (int j = 0; j < group; ++j) {
      const std::int64_t h = g * group + j;
      for (std::int64_t i = 0; i < nq; ++i) {
        const std::int64_t begin = p.key_begin(i), end = p.key_end(i);
        if (begin >= end) continue;  // dQ row stays 0
        const float lse = static_cast<float>(forward.lse[static_cast<std::size_t>((b * hq + h) * nq + i)]);
        const double* o = &forward.out[static_cast<std::size_t>(out_index(p, b, h, i))];
        float row_dot = 0.0f;
        for (std::int64_t c = 0; c < dv; ++c) row_dot += d_o.at(p.dtype, b, i, h, c) * static_cast<float>(o[c]);
        std::vector<float> dq(static_cast<std::size_t>(d), 0.0f);
        std::vector<double> dq_terms(dq.size(), 0.0);
        for (std::int64_t key = begin; key < end; ++key) {
          float dot = 0.0f, dp = 0.0f;
          for (std::int64_t c = 0; c < d; ++c) dot += in.q.at(p.dtype, b, i, h, c) * in.k.at(p.dtype, b, key, g, c);
          for (std::int64_t c = 0; c < dv; ++c) dp += d_o.at(p.dtype, b, i, h, c) * in.v.at(p.dtype, b, key, g, c);
          const float prob = std::exp(dot * scale - lse);
          const float ds = round_to(p.dtype, prob * (dp - row_dot));
          const float prob_rounded = round_to(p.dtype, prob);
          const double ds_terms = static_cast<double>(prob) * (std::abs(dp) + std::abs(row_dot)) * scale;
          for (std::int64_t c = 0; c < d; ++c) {
            const float q_value = in.q.at(p.dtype, b, i, h, c), k_value = in.k.at(p.dtype, b, key, g, c);
            dq[static_cast<std::size_t>(c)] += ds * scale * k_value;
            dk[static_cast<std::size_t>(key * d + c)] += ds * scale * q_value;
            dq_terms[static_cast<std::size_t>(c)] += ds_terms * std::abs(k_value);
            dk_terms[static_cast<std::size_t>(key * d + c)] += ds_terms * std::abs(q_value);
          }
          for (std::int64_t c = 0; c < dv; ++c) {
            const float grad = d_o.at(p.dtype, b, i, h, c);
            dv_acc[static_cast<std::size_t>(key * dv + c)] += prob_rounded * grad;
            dv_terms[static_cast<std::size_t>(key * dv + c)] += prob * std::abs(grad);
          }
        }
        for (std::int64_t c = 0; c < d; ++c) {
          out.grads.dq[static_cast<std::size_t>(((b * nq + i) * hq + h) * d + c)] =
              round_to(p.dtype, dq[static_cast<std::size_t>(c)]);
          terms[0] = std::max(terms[0], dq_terms[static_cast<std::size_t>(c)]);
        }
      }
    }
    for (std::int64_t key = 0; key < nk; ++key) {
      for (std::int64_t c = 0; c < d; ++c)
        out.grads.dk[static_cast<std::size_t>(((b * nk + key) * hkv + g) * d + c)] =
            round_to(p.dtype, dk[static_cast<std::size_t>(key * d + c)]);
      for (std::int64_t c = 0; c < dv; ++c)
        out.grads.dv[static_cast<std::size_t>(((b * nk + key) * hkv + g) * dv + c)] =
            round_to(p.dtype, dv_acc[static_cast<std::size_t>(key * dv + c)]);
    }
    for (double value : dk_terms) terms[1] = std::max(terms[1], value);
    for (double value : dv_terms) terms[2] = std::max(terms[2], value);
  });
  for (const auto& terms : item_terms)
    for (int g = 0; g < 3; ++g) out.terms[g] = std::max(out.terms[g], terms[g]);
  return out;
}

// A few ulps of the dtype at the gradient's largest magnitude, plus a few fp32 ulps of its largest
// sum of absolute terms.
inline double rounding_floor(DType dtype, double max_ref, double max_terms) {
  const int mantissa_bits = dtype == DType::F16 ? 10 : 7;
  const double ulp = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(std::max(max_ref, 1e-3)))) - mantissa_bits);
  return 4.0 * ulp + 4.0 * std::numeric_limits<float>::epsilon() * max_terms;
}

// FlashAttention's rule for one gradient; returns its max abs error.
inline double expect_within(const char* what, const std::vector<double>& got, const std::vector<double>& naive,
                            const std::vector<double>& truth, DType dtype, double max_terms) {
  const ErrorStats error = compare(got, truth);
  const ErrorStats baseline = compare(naive, truth);
  const double tolerance = 2.0 * baseline.max_abs + rounding_floor(dtype, max_abs(truth), max_terms);
  EXPECT_EQ(error.nan_count, 0) << what << ": " << error.nan_count << " NaN elements (poison never overwritten?)";
  EXPECT_LE(error.max_abs, tolerance) << what << ": max abs error " << error.max_abs << " at logical index "
                                      << error.worst_index << " of " << truth.size() << " (mean " << error.mean_abs
                                      << "); naive same-dtype max " << baseline.max_abs << ", tolerance " << tolerance;
  return error.max_abs;
}

// The gradients of one run (runs.bits[0]) against the fp64 reference, each by FlashAttention's
// rule (expect_within), and dQ exactly 0 in the rows that see no key; their max abs errors.
struct GradientErrors {
  double dq = 0.0, dk = 0.0, dv = 0.0;
};
inline GradientErrors expect_gradients_match_reference(const AttentionProblem& p, const Inputs& in,
                                                       const HostTensor& d_o, const BackwardRuns& runs) {
  if (runs.bits.size() != 1) {
    ADD_FAILURE() << "no gradients";
    return {};
  }
  const Gradients got{as_values(runs.bits[0][0], p.dtype), as_values(runs.bits[0][1], p.dtype),
                      as_values(runs.bits[0][2], p.dtype)};
  const cpu::GradientsF64 truth = reference_gradients(p, in, d_o);
  const NaiveBackward naive = naive_backward_same_dtype(p, in, d_o);
  GradientErrors errors;
  errors.dq = expect_within("dQ", got.dq, naive.grads.dq, truth.dq, p.dtype, naive.terms[0]);
  errors.dk = expect_within("dK", got.dk, naive.grads.dk, truth.dk, p.dtype, naive.terms[1]);
  errors.dv = expect_within("dV", got.dv, naive.grads.dv, truth.dv, p.dtype, naive.terms[2]);
  std::int64_t nonzero = 0;
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    if (p.key_begin(i) < p.key_end(i)) continue;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        for (std::int64_t c = 0; c < p.head_dim; ++c)
          nonzero += got.dq[static_cast<std::size_t>(((b * p.seq_q + i) * p.heads_q + h) * p.head_dim + c)] != 0.0;
  }
  EXPECT_EQ(nonzero, 0) << "dQ elements not 0 in rows that see no key";
  return errors;
}

// A deterministic plan's backward, three runs from one forward on fresh random inputs: every
// gradient bitwise equal to the first run's.
inline void expect_backward_repeats_bitwise(bench::DeviceContext* context, KernelPlan& plan,
                                            const AttentionProblem& p) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(p.describe() + " seed " + std::to_string(seed));
  const BackwardRuns runs =
      run_backward_on_device(context, plan, p, random_inputs(p, seed), random_output_gradient(p, seed + 2), 3);
  ASSERT_EQ(runs.bits.size(), 3u);
  for (int run = 1; run < 3; ++run)
    for (int g = 0; g < 3; ++g)
      EXPECT_TRUE(runs.bits[run][g] == runs.bits[0][g])
          << "gradient " << g << " of run " << run << " differs from run 0";
}

}  // namespace attnsuite::testing_support

#endif  // ATTNSUITE_HAVE_CUDA
