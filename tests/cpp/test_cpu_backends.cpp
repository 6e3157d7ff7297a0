// The CPU backends (reference, cpu-vanilla, cpu-flash) against an independent fp64 triple loop
// written here, with FlashAttention's tolerance rule: a backend's max error may be at most
// twice the max error of a naive implementation in the same dtype (fp32 math; for fp16/bf16
// with the output rounded to that dtype), plus a small floor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "cli_test_support.hpp"
#include "core/isa.hpp"
#include "core/peak.hpp"
#include "cpu/cpu_backends.hpp"
#include "shape_cases.hpp"

namespace attnsuite {
namespace {

using namespace test_shapes;

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// Tensors in either layout, optionally with padded rows (strides wider than the data).

struct HostTensor {
  std::vector<unsigned char> storage;
  TensorView view;
};

// The storage starts as all-ones bytes, a NaN in every dtype: padding a backend must not read
// and outputs it must overwrite.
HostTensor make_tensor(std::array<std::int64_t, 4> shape, DType dtype, Layout layout, std::int64_t dim_padding = 0) {
  std::array<std::int64_t, 4> padded = shape;
  padded[3] += dim_padding;
  HostTensor tensor;
  tensor.view.dtype = dtype;
  tensor.view.shape = shape;
  tensor.view.strides = TensorView::dense_strides(padded, layout);
  tensor.storage.assign(static_cast<std::size_t>(padded[0] * padded[1] * padded[2] * padded[3]) * size_of(dtype), 0xFF);
  tensor.view.data = tensor.storage.data();
  return tensor;
}

void poison(HostTensor& tensor) { std::fill(tensor.storage.begin(), tensor.storage.end(), 0xFF); }

template <class F>
void for_each_index(const TensorView& view, F&& body) {
  for (std::int64_t b = 0; b < view.shape[0]; ++b)
    for (std::int64_t s = 0; s < view.shape[1]; ++s)
      for (std::int64_t h = 0; h < view.shape[2]; ++h)
        for (std::int64_t d = 0; d < view.shape[3]; ++d) body(b, s, h, d);
}

void fill_normal(HostTensor& tensor, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for_each_index(tensor.view, [&](auto b, auto s, auto h, auto d) {
    store_from_float(tensor.view.data, tensor.view.dtype, tensor.view.offset(b, s, h, d), normal(rng));
  });
}

// Logical (b, s, h, d) order, whatever the layout.
std::vector<float> read_logical(const TensorView& view) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(view.numel()));
  for_each_index(view, [&](auto b, auto s, auto h, auto d) {
    out.push_back(load_as_float(view.data, view.dtype, view.offset(b, s, h, d)));
  });
  return out;
}

float round_to(DType dtype, float value) {
  std::uint32_t storage = 0;
  store_from_float(&storage, dtype, 0, value);
  return load_as_float(&storage, dtype, 0);
}

// ---------------------------------------------------------------------------------------------
// The independent references: a straight loop in double, and the same loop in float.

struct Outputs {
  std::vector<double> o;    // (batch, seq_q, heads_q, dim_v)
  std::vector<double> lse;  // (batch, heads_q, seq_q)
};

// The mask written out from its definition (bottom-right aligned diagonal).
bool visible(const AttentionProblem& p, std::int64_t i, std::int64_t j) {
  const std::int64_t diag = i + p.seq_kv - p.seq_q;
  if (p.causal && j > diag) return false;
  if (p.window_left >= 0 && j < diag - p.window_left) return false;
  if (p.window_right >= 0 && j > diag + p.window_right) return false;
  return true;
}

float scale_of(const AttentionProblem& p) {
  return p.scale != 0.0f ? p.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.head_dim)));
}

// Real is double for the ground truth, float for the same-dtype naive implementation.
template <class Real>
Outputs naive_attention(const AttentionProblem& p, const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v) {
  const std::int64_t hq = p.heads_q, hkv = p.heads_kv, nq = p.seq_q, nk = p.seq_kv;
  const std::int64_t d_qk = p.head_dim, d_v = p.dim_v();
  const Real scale = scale_of(p);
  Outputs out;
  out.o.assign(static_cast<std::size_t>(p.batch * nq * hq * d_v), 0.0);
  out.lse.assign(static_cast<std::size_t>(p.batch * hq * nq), -kInf);
  std::vector<Real> scores(static_cast<std::size_t>(nk));
  std::vector<Real> acc(static_cast<std::size_t>(d_v));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t g = h / (hq / hkv);
      for (std::int64_t i = 0; i < nq; ++i) {
        Real row_max = -std::numeric_limits<Real>::infinity();
        for (std::int64_t j = 0; j < nk; ++j) {
          if (!visible(p, i, j)) continue;
          Real dot = 0;
          for (std::int64_t d = 0; d < d_qk; ++d)
            dot += static_cast<Real>(q[((b * nq + i) * hq + h) * d_qk + d]) *
                   static_cast<Real>(k[((b * nk + j) * hkv + g) * d_qk + d]);
          scores[j] = dot * scale;
          row_max = std::max(row_max, scores[j]);
        }
        if (row_max == -std::numeric_limits<Real>::infinity()) continue;  // no visible key
        Real sum = 0;
        std::fill(acc.begin(), acc.end(), Real(0));
        for (std::int64_t j = 0; j < nk; ++j) {
          if (!visible(p, i, j)) continue;
          const Real weight = std::exp(scores[j] - row_max);
          sum += weight;
          for (std::int64_t d = 0; d < d_v; ++d)
            acc[d] += weight * static_cast<Real>(v[((b * nk + j) * hkv + g) * d_v + d]);
        }
        for (std::int64_t d = 0; d < d_v; ++d) {
          Real value = acc[d] / sum;
          if (!std::is_same_v<Real, double>) value = round_to(p.dtype, static_cast<float>(value));
          out.o[((b * nq + i) * hq + h) * d_v + d] = value;
        }
        out.lse[(b * hq + h) * nq + i] = row_max + std::log(sum);
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Running a backend and measuring its error.

struct Inputs {
  HostTensor q, k, v;
  std::vector<float> q_values, k_values, v_values;
};

Inputs make_inputs(const AttentionProblem& p, std::uint64_t seed, std::int64_t dim_padding = 0) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.q = make_tensor({p.batch, p.seq_q, p.heads_q, p.head_dim}, p.dtype, p.layout, dim_padding);
  in.k = make_tensor({p.batch, p.seq_kv, p.heads_kv, p.head_dim}, p.dtype, p.layout, dim_padding);
  in.v = make_tensor({p.batch, p.seq_kv, p.heads_kv, p.dim_v()}, p.dtype, p.layout, dim_padding);
  fill_normal(in.q, rng);
  fill_normal(in.k, rng);
  fill_normal(in.v, rng);
  in.q_values = read_logical(in.q.view);
  in.k_values = read_logical(in.k.view);
  in.v_values = read_logical(in.v.view);
  return in;
}

struct RunOutput {
  HostTensor o;
  std::vector<float> lse;
  RunReport report;
};

RunOutput run_backend(const Backend& backend, const AttentionProblem& p, const Inputs& in, std::int64_t dim_padding = 0,
                      const PlanOptions& options = {}) {
  RunOutput run;
  run.o = make_tensor({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.dtype, p.layout, dim_padding);
  poison(run.o);
  run.lse.assign(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q), std::numeric_limits<float>::quiet_NaN());
  AttentionArgs args;
  args.q = in.q.view;
  args.k = in.k.view;
  args.v = in.v.view;
  args.o = run.o.view;
  args.lse.data = run.lse.data();
  run.report = backend.forward(p, args, nullptr, options);
  return run;
}

struct ErrorStats {
  double max_abs = 0.0;
  double mean_abs = 0.0;
  std::int64_t worst = -1;
  std::int64_t nans = 0;
  std::int64_t wrong_infinities = 0;  // expected -inf (or exact 0 for masked rows) and got other
  double max_ref = 0.0;
};

ErrorStats compare(const std::vector<double>& got, const std::vector<double>& ref) {
  ErrorStats stats;
  double total = 0.0;
  std::int64_t finite = 0;
  for (std::size_t n = 0; n < ref.size(); ++n) {
    if (std::isnan(got[n])) {
      ++stats.nans;
      continue;
    }
    if (std::isinf(ref[n]) || std::isinf(got[n])) {
      if (got[n] != ref[n]) ++stats.wrong_infinities;
      continue;
    }
    const double error = std::abs(got[n] - ref[n]);
    if (error > stats.max_abs) {
      stats.max_abs = error;
      stats.worst = static_cast<std::int64_t>(n);
    }
    stats.max_ref = std::max(stats.max_ref, std::abs(ref[n]));
    total += error;
    ++finite;
  }
  stats.mean_abs = finite > 0 ? total / finite : 0.0;
  return stats;
}

std::vector<double> to_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// A few units in the last place of the output dtype at the output's magnitude.
double output_floor(DType dtype, double max_ref) {
  if (dtype == DType::F32) return 1e-6;
  const int mantissa_bits = dtype == DType::F16 ? 10 : 7;
  const double ulp = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(std::max(max_ref, 1e-3)))) - mantissa_bits);
  return 2.0 * ulp;
}

void expect_within(const char* what, const ErrorStats& backend, const ErrorStats& naive, double floor) {
  const double tolerance = 2.0 * naive.max_abs + floor;
  EXPECT_EQ(backend.nans, 0) << what << ": " << backend.nans << " NaN elements";
  EXPECT_EQ(backend.wrong_infinities, 0) << what << ": " << backend.wrong_infinities
                                         << " elements where -inf was expected or produced wrongly";
  EXPECT_LE(backend.max_abs, tolerance) << what << ": max abs error " << backend.max_abs << " (element "
                                        << backend.worst << "), mean abs error " << backend.mean_abs
                                        << "; naive same-dtype max " << naive.max_abs << " mean " << naive.mean_abs
                                        << "; tolerance " << tolerance;
}

// Checks a backend's O and LSE for problem p against the fp64 loop; returns what the run reported.
RunReport check_backend(const std::string& name, const AttentionProblem& p, std::uint64_t seed,
                        std::int64_t dim_padding = 0, const PlanOptions& options = {}) {
  SCOPED_TRACE(name + " on " + p.describe() + (dim_padding ? " (padded strides)" : ""));
  const Backend& backend = Registry::global().find(name);
  if (const Support support = backend.supports(p); !support) {
    ADD_FAILURE() << support.reason;
    return {};
  }
  const Inputs in = make_inputs(p, seed, dim_padding);
  const Outputs truth = naive_attention<double>(p, in.q_values, in.k_values, in.v_values);
  const Outputs naive = naive_attention<float>(p, in.q_values, in.k_values, in.v_values);
  const RunOutput run = run_backend(backend, p, in, dim_padding, options);
  const std::vector<float> got_o = read_logical(run.o.view);

  const ErrorStats o_error = compare(to_double(got_o), truth.o);
  const ErrorStats o_naive = compare(naive.o, truth.o);
  expect_within("O", o_error, o_naive, output_floor(p.dtype, o_error.max_ref));

  // Fully masked rows: exactly O = 0 and LSE = -inf.
  for (std::int64_t n = 0; n < static_cast<std::int64_t>(truth.lse.size()); ++n) {
    if (truth.lse[n] != -kInf) continue;
    const std::int64_t b = n / (p.heads_q * p.seq_q), h = n / p.seq_q % p.heads_q, i = n % p.seq_q;
    for (std::int64_t d = 0; d < p.dim_v(); ++d) {
      const float value = got_o[((b * p.seq_q + i) * p.heads_q + h) * p.dim_v() + d];
      EXPECT_EQ(value, 0.0f) << "masked row b=" << b << " h=" << h << " i=" << i << " d=" << d;
      if (value != 0.0f) return run.report;
    }
  }

  const ErrorStats lse_error = compare(to_double(run.lse), truth.lse);
  const ErrorStats lse_naive = compare(naive.lse, truth.lse);
  expect_within("LSE", lse_error, lse_naive,
                4.0 * std::numeric_limits<float>::epsilon() * std::max(1.0, lse_error.max_ref));
  return run.report;
}

// ---------------------------------------------------------------------------------------------
// The cases: every backend × every shape it supports, in both layouts.

std::vector<Case> cases() {
  std::vector<Case> list = shape_cases();
  // The forward's head dims beyond the shared ones.
  for (Case extra : {Case{"dim32", shape(1, 2, 2, 100, 100, 32)}, Case{"dim96", shape(1, 2, 2, 100, 100, 96)},
                     Case{"dim128", with(shape(1, 2, 2, 150, 150, 128), true)},
                     Case{"dim64_dv128", shape(1, 2, 2, 100, 120, 64, 128)}})
    list.push_back(std::move(extra));
  return list;
}

struct Param {
  std::string backend;
  Case entry;
  DType dtype;
  Layout layout;
};

std::vector<Param> params() {
  std::vector<Param> out;
  for (const char* backend : {"reference", "cpu-vanilla", "cpu-flash"}) {
    for (const Case& c : cases()) {
      for (Layout layout : {Layout::BSHD, Layout::BHSD}) out.push_back({backend, c, DType::F32, layout});
    }
  }
  // 16-bit inputs: vanilla is fp32 only.
  for (const char* backend : {"reference", "cpu-flash"}) {
    for (const char* label : {"seq33", "causal_q_gt_kv", "gqa_8_2", "dim40_dv72", "window_masks_rows"}) {
      for (const Case& c : cases()) {
        if (c.label != label) continue;
        for (DType dtype : {DType::F16, DType::BF16}) out.push_back({backend, c, dtype, Layout::BSHD});
      }
    }
  }
  return out;
}

// What ctest and failures print for a case instead of the struct's bytes.
void PrintTo(const Param& param, std::ostream* os) {
  AttentionProblem p = param.entry.problem;
  p.dtype = param.dtype;
  p.layout = param.layout;
  *os << param.backend << " " << p.describe();
}

class CpuBackendAccuracy : public ::testing::TestWithParam<Param> {};

TEST_P(CpuBackendAccuracy, MatchesFp64Loop) {
  const Param& param = GetParam();
  AttentionProblem p = param.entry.problem;
  p.dtype = param.dtype;
  p.layout = param.layout;
  check_backend(param.backend, p, /*seed=*/0x5eed + std::hash<std::string>{}(param.entry.label));
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string name = info.param.backend + "_" + info.param.entry.label + "_" +
                     std::string(to_string(info.param.dtype)) + "_" + std::string(to_string(info.param.layout));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(All, CpuBackendAccuracy, ::testing::ValuesIn(params()), param_name);

// ---------------------------------------------------------------------------------------------

TEST(CpuBackends, PaddedStridesAreHonoured) {
  // Rows wider than the data (padding is NaN): a backend that assumes dense rows reads NaN.
  for (const char* name : {"reference", "cpu-vanilla", "cpu-flash"}) {
    for (Layout layout : {Layout::BSHD, Layout::BHSD}) {
      AttentionProblem p = with(shape(2, 4, 2, 45, 70, 64), true);
      p.layout = layout;
      check_backend(name, p, 7, /*dim_padding=*/8);
    }
  }
}

TEST(CpuBackends, ReferenceTakesAnyLastDimStride) {
  AttentionProblem p = shape(1, 2, 2, 20, 30, 32);
  const Inputs dense = make_inputs(p, 11);
  // The same values with every element two apart.
  Inputs sparse = dense;
  for (HostTensor* t : {&sparse.q, &sparse.k, &sparse.v}) {
    HostTensor wide =
        make_tensor({t->view.shape[0], t->view.shape[1], t->view.shape[2], t->view.shape[3] * 2}, p.dtype, p.layout);
    wide.view.shape = t->view.shape;
    wide.view.strides[3] = 2;
    for_each_index(t->view, [&](auto b, auto s, auto h, auto d) {
      store_from_float(wide.view.data, p.dtype, wide.view.offset(b, s, h, d),
                       load_as_float(t->view.data, p.dtype, t->view.offset(b, s, h, d)));
    });
    *t = std::move(wide);
    t->view.data = t->storage.data();
  }
  Backend& reference = Registry::global().find("reference");
  const RunOutput a = run_backend(reference, p, dense);
  const RunOutput b = run_backend(reference, p, sparse);
  EXPECT_EQ(std::memcmp(a.o.storage.data(), b.o.storage.data(), a.o.storage.size()), 0);
  // The fast backends need a contiguous last dim and say so.
  EXPECT_THROW(run_backend(Registry::global().find("cpu-flash"), p, sparse), Error);
  EXPECT_THROW(run_backend(Registry::global().find("cpu-vanilla"), p, sparse), Error);
}

TEST(CpuBackends, ReferenceHeadMatchesLoop) {
  AttentionProblem p = with(shape(2, 4, 2, 40, 50, 64, 32), true, 10, 0);
  p.dtype = DType::BF16;
  const Inputs in = make_inputs(p, 3);
  const Outputs truth = naive_attention<double>(p, in.q_values, in.k_values, in.v_values);
  AttentionArgs args;
  args.q = in.q.view;
  args.k = in.k.view;
  args.v = in.v.view;
  std::vector<double> out(static_cast<std::size_t>(p.seq_q * p.dim_v()));
  std::vector<double> lse(static_cast<std::size_t>(p.seq_q));
  cpu::reference_head_f64(p, args, 1, 3, out.data(), lse.data());
  for (std::int64_t i = 0; i < p.seq_q; ++i) {
    EXPECT_NEAR(lse[i], truth.lse[(1 * p.heads_q + 3) * p.seq_q + i], 1e-12);
    for (std::int64_t d = 0; d < p.dim_v(); ++d)
      EXPECT_NEAR(out[i * p.dim_v() + d], truth.o[((1 * p.seq_q + i) * p.heads_q + 3) * p.dim_v() + d], 1e-12);
  }
}

TEST(CpuBackends, FlashIsDeterministic) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    AttentionProblem p = with(shape(2, 4, 2, 333, 400, 64), true);
    p.dtype = dtype;
    const Inputs in = make_inputs(p, 5);
    Backend& flash = Registry::global().find("cpu-flash");
    const RunOutput first = run_backend(flash, p, in);
    const RunOutput second = run_backend(flash, p, in);
    EXPECT_EQ(std::memcmp(first.o.storage.data(), second.o.storage.data(), first.o.storage.size()), 0);
    EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * sizeof(float)), 0);
  }
}

TEST(CpuBackends, SupportsExplainsRefusals) {
  for (const char* name : {"reference", "cpu-vanilla", "cpu-flash"}) {
    Backend& backend = Registry::global().find(name);
    EXPECT_EQ(backend.device().type, DeviceType::Cpu);
    for (int dim : {32, 40, 96, 256}) EXPECT_TRUE(backend.supports(shape(1, 1, 1, 8, 8, dim)).ok) << name << dim;
    for (int dim : {16, 31, 257, 512}) {
      const Support support = backend.supports(shape(1, 1, 1, 8, 8, dim));
      EXPECT_FALSE(support.ok);
      EXPECT_EQ(support.reason, "head dim " + std::to_string(dim) + " not supported; allowed: 32..256");
    }
    const Support dim_v = backend.supports(shape(1, 1, 1, 8, 8, 64, 300));
    EXPECT_FALSE(dim_v.ok);
    EXPECT_EQ(dim_v.reason, "head dim 300 not supported; allowed: 32..256");
    EXPECT_FALSE(backend.supports(shape(1, 3, 2, 8, 8, 64)).ok);  // heads_q not a multiple of heads_kv
  }
  for (DType dtype : {DType::F16, DType::BF16}) {
    AttentionProblem p = shape(1, 1, 1, 8, 8, 64);
    p.dtype = dtype;
    const Support vanilla = Registry::global().find("cpu-vanilla").supports(p);
    EXPECT_FALSE(vanilla.ok);
    EXPECT_NE(vanilla.reason.find(std::string(to_string(dtype))), std::string::npos) << vanilla.reason;
    EXPECT_NE(vanilla.reason.find("allowed: fp32"), std::string::npos) << vanilla.reason;
    EXPECT_TRUE(Registry::global().find("cpu-flash").supports(p).ok);
    EXPECT_TRUE(Registry::global().find("reference").supports(p).ok);
  }
}

TEST(CpuBackends, ForwardRejectsMismatchedArguments) {
  AttentionProblem p = shape(1, 2, 2, 16, 16, 64);
  Inputs in = make_inputs(p, 1);
  AttentionProblem other = p;
  other.seq_q = 17;  // the views say 16
  for (const char* name : {"reference", "cpu-vanilla", "cpu-flash"}) {
    Backend& backend = Registry::global().find(name);
    EXPECT_THROW(run_backend(backend, other, in), Error) << name;
    AttentionProblem unsupported = p;
    unsupported.head_dim = 16;
    EXPECT_THROW(run_backend(backend, unsupported, in), Error) << name;
  }
}

TEST(CpuBackends, RegistersInOrder) {
  Registry registry;
  cpu::register_cpu_backends(registry);
  EXPECT_EQ(registry.names(),
            (std::vector<std::string>{"reference", "cpu-vanilla", "cpu-flash", "cpu-sparge", "cpu-block-sparse"}));
  // Every build lists the CPU's backends first, the ring over cpu-flash (src/ring) right after.
  Registry builtin;
  register_builtin_backends(builtin);
  std::vector<std::string> first = builtin.names();
  ASSERT_GE(first.size(), 6u);
  first.resize(6);
  EXPECT_EQ(first, (std::vector<std::string>{"reference", "cpu-vanilla", "cpu-flash", "cpu-sparge", "cpu-block-sparse",
                                             "cpu-ring"}));
  EXPECT_EQ(registry.find("reference").display_name(), "fp64 reference (attnsuite)");
  EXPECT_EQ(registry.find("cpu-vanilla").display_name(), "vanilla attention (attnsuite, OpenBLAS)");
  EXPECT_EQ(registry.find("cpu-flash").display_name(), "FlashAttention-style tiled CPU kernel (attnsuite)");
}

// Peak tracked bytes of one forward beyond what was allocated before it.
std::size_t peak_extra_bytes(const std::string& name, const AttentionProblem& p, const Inputs& in) {
  MemoryTracker& tracker = MemoryTracker::for_device(DeviceType::Cpu);
  const std::size_t before = tracker.current();
  tracker.reset_peak();
  run_backend(Registry::global().find(name), p, in);
  return tracker.peak() - before;
}

TEST(CpuBackends, FlashMemoryIsLinearVanillaIsQuadratic) {
  std::size_t flash_extra[2] = {0, 0};
  int index = 0;
  for (int seq : {1024, 2048}) {
    const AttentionProblem p = shape(1, 4, 4, seq, seq, 64);
    const Inputs in = make_inputs(p, 9);
    const std::size_t scores_bytes = static_cast<std::size_t>(p.batch) * p.heads_q * seq * seq * sizeof(float);
    const std::size_t vanilla = peak_extra_bytes("cpu-vanilla", p, in);
    const std::size_t flash = peak_extra_bytes("cpu-flash", p, in);
    EXPECT_GE(vanilla, scores_bytes) << "seq " << seq;
    // Per-thread tiles of 220 KiB (query tiles of 192) to 390 KiB (384) whatever N (measured:
    // 3.4 MiB on 16 threads, 0.43 MiB on 2 with 192), against 16–64 MiB of scores for vanilla.
    const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
    EXPECT_LE(flash, threads * (std::size_t{512} << 10)) << "flash " << flash << " B on " << threads << " threads";
    EXPECT_GT(flash, 0u) << "cpu-flash allocates its tiles through HostBuffer";
    flash_extra[index++] = flash;
  }
  // Per-thread tiles: doubling N must not grow it (let alone 4×).
  EXPECT_LE(flash_extra[1], flash_extra[0]);
}

// Every tile configuration of cpu-flash (what `tune --kernels` chooses among) on the odd shapes.
TEST(CpuBackends, EveryCpuFlashKernelConfigMatchesTheFp64Loop) {
  const Backend& backend = Registry::global().find("cpu-flash");
  const std::vector<std::string> configs = backend.kernel_configs(shape(1, 1, 1, 7, 7, 64));
  ASSERT_GE(configs.size(), 2u);
  EXPECT_EQ(configs.front(), "q192-k96");  // the built-in choice first: few work items here
  for (const std::string& config : configs) {
    PlanOptions options;
    options.kernel_config = config;
    for (const char* label : {"seq1", "seq33", "seq1000", "causal_q_gt_kv", "gqa_8_2", "window_both", "dim40_dv72"}) {
      for (const Case& c : cases()) {
        if (c.label != label) continue;
        SCOPED_TRACE("config " + config);
        // The report adds the vector ISA that ran.
        EXPECT_EQ(check_backend("cpu-flash", c.problem, 11, 0, options).kernel_config,
                  config + "/" + std::string(cpu::to_string(cpu::selected_cpu_isa())));
      }
    }
  }
  PlanOptions unknown;
  unknown.kernel_config = "q7-k7";
  EXPECT_THROW(backend.plan(shape(1, 2, 2, 7, 7, 64), unknown), Error);
}

// Without a forced config or a cache entry: query tiles of 384 for unmasked problems with at
// least two work items per thread, 192 otherwise; the run reports what it chose.
TEST(CpuBackends, CpuFlashBuiltInTilesFollowTheProblem) {
  const Backend& backend = Registry::global().find("cpu-flash");
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const AttentionProblem wide = shape(1, 2 * threads, 2 * threads, 384, 384, 64);
  EXPECT_EQ(backend.kernel_configs(wide).front(), "q384-k96");
  EXPECT_EQ(backend.kernel_configs(with(wide, true)).front(), "q192-k96");
  EXPECT_EQ(backend.kernel_configs(with(wide, false, 100, 0)).front(), "q192-k96");
  EXPECT_EQ(backend.kernel_configs(shape(1, 2 * threads - 1, 2 * threads - 1, 384, 384, 64)).front(), "q192-k96");
  EXPECT_EQ(backend.kernel_configs(wide).size(), backend.kernel_configs(with(wide, true)).size());
}

// ---------------------------------------------------------------------------------------------
// cpu-flash's kernels are built for AVX2 and for AVX-512 and chosen at run time (the widest the
// CPU has, unless ATTNSUITE_CPU_ISA says otherwise), so the runs above test only the widest
// here. These force each ISA through the kernel config ("q192-k96/avx2"), which the backend
// then reports.

std::string skip_reason_for(cpu::CpuIsa isa) {
  if (cpu::cpu_supports(isa)) return {};
  return "this CPU has no " + std::string(cpu::to_string(isa)) +
         " (AVX-512 needs avx512f, avx512bw, avx512dq and avx512vl, and an OS that saves the zmm registers)";
}

class CpuFlashIsa : public ::testing::TestWithParam<cpu::CpuIsa> {
 protected:
  void SetUp() override {
    if (const std::string reason = skip_reason_for(GetParam()); !reason.empty()) GTEST_SKIP() << reason;
  }
  std::string with_isa(const std::string& tiles) const { return tiles + "/" + std::string(cpu::to_string(GetParam())); }
};

TEST_P(CpuFlashIsa, EveryCaseMatchesTheFp64Loop) {
  PlanOptions options;
  options.kernel_config = with_isa("q192-k96");
  for (const Param& param : params()) {
    if (param.backend != "cpu-flash") continue;
    AttentionProblem p = param.entry.problem;
    p.dtype = param.dtype;
    p.layout = param.layout;
    EXPECT_EQ(
        check_backend("cpu-flash", p, 0x5eed + std::hash<std::string>{}(param.entry.label), 0, options).kernel_config,
        options.kernel_config);
  }
  check_backend("cpu-flash", with(shape(2, 4, 2, 45, 70, 64), true), 7, /*dim_padding=*/8, options);
}

// Every tile config: each has its own tails (a 16-query tail of the 32-query AVX-512 block, the
// 2- and 4-query tails of AVX2's 6-query P·V block).
TEST_P(CpuFlashIsa, EveryTileConfigMatchesTheFp64Loop) {
  const Backend& flash = Registry::global().find("cpu-flash");
  for (const std::string& tiles : flash.kernel_configs(shape(1, 2, 2, 7, 7, 64))) {
    PlanOptions options;
    options.kernel_config = with_isa(tiles);
    for (const char* label : {"seq1", "seq33", "seq1000", "causal_q_gt_kv", "gqa_8_2", "window_both", "dim40_dv72"}) {
      for (const Case& c : cases()) {
        if (c.label != label) continue;
        SCOPED_TRACE("config " + options.kernel_config);
        EXPECT_EQ(check_backend("cpu-flash", c.problem, 11, 0, options).kernel_config, options.kernel_config);
      }
    }
  }
}

TEST_P(CpuFlashIsa, PeakProbeRuns) {
  const double gflops = cpu::measure_fp32_fma_peak_gflops(GetParam(), 0.05);
  EXPECT_TRUE(std::isfinite(gflops));
  EXPECT_GT(gflops, 1.0) << "a core issues at least one FMA per ns";
}

INSTANTIATE_TEST_SUITE_P(All, CpuFlashIsa, ::testing::Values(cpu::CpuIsa::Avx2, cpu::CpuIsa::Avx512),
                         [](const ::testing::TestParamInfo<cpu::CpuIsa>& param_info) {
                           return std::string(cpu::to_string(param_info.param));
                         });

// $ATTNSUITE_CPU_ISA chooses the ISA for every call without a forced one; bad values are refused
// with what is allowed.
TEST(CpuFlashIsaSelection, EnvironmentVariableChoosesAndIsChecked) {
  const char* saved = std::getenv("ATTNSUITE_CPU_ISA");
  const std::optional<std::string> previous = saved ? std::optional<std::string>(saved) : std::nullopt;
  const Backend& flash = Registry::global().find("cpu-flash");
  const AttentionProblem p = shape(1, 2, 2, 40, 40, 64);
  const Inputs in = make_inputs(p, 3);

  const std::string tiles = flash.kernel_configs(p).front();
  unsetenv("ATTNSUITE_CPU_ISA");
  EXPECT_EQ(cpu::selected_cpu_isa(), cpu::widest_cpu_isa());
  EXPECT_EQ(run_backend(flash, p, in).report.kernel_config,
            tiles + "/" + std::string(cpu::to_string(cpu::widest_cpu_isa())));

  setenv("ATTNSUITE_CPU_ISA", "avx2", 1);
  EXPECT_EQ(run_backend(flash, p, in).report.kernel_config, tiles + "/avx2");

  setenv("ATTNSUITE_CPU_ISA", "avx512", 1);
  if (cpu::cpu_supports(cpu::CpuIsa::Avx512)) {
    EXPECT_EQ(run_backend(flash, p, in).report.kernel_config, tiles + "/avx512");
  } else {
    try {
      run_backend(flash, p, in);
      ADD_FAILURE() << "ran AVX-512 kernels on a CPU without them";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
      EXPECT_NE(std::string(error.what()).find("this CPU lacks it"), std::string::npos) << error.what();
    }
  }

  setenv("ATTNSUITE_CPU_ISA", "sse2", 1);
  try {
    run_backend(flash, p, in);
    ADD_FAILURE() << "an unknown ISA was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Usage);
    EXPECT_STREQ(error.what(), "ATTNSUITE_CPU_ISA 'sse2' unknown; allowed: avx2, avx512");
  }

  if (previous) {
    setenv("ATTNSUITE_CPU_ISA", previous->c_str(), 1);
  } else {
    unsetenv("ATTNSUITE_CPU_ISA");
  }
}

// The CLI refuses a bad value before any work, with one line and the usage exit code.
TEST(CpuFlashIsaSelection, CliRefusesAnUnknownIsa) {
  using testing_support::CliResult;
  using testing_support::run_cli;
  const CliResult info = run_cli({"info"}, {"ATTNSUITE_CPU_ISA=sse2"});
  EXPECT_EQ(info.code, 2);
  EXPECT_EQ(info.err, "attnsuite: error: ATTNSUITE_CPU_ISA 'sse2' unknown; allowed: avx2, avx512\n");
  const CliResult list = run_cli({"list"}, {"ATTNSUITE_CPU_ISA=avx2"});
  EXPECT_EQ(list.code, 0) << list.err;
}

TEST(CpuFlashIsaSelection, ForcedConfigNamesAKnownIsa) {
  const Backend& flash = Registry::global().find("cpu-flash");
  const AttentionProblem p = shape(1, 2, 2, 40, 40, 64);
  const auto plan_with = [&](const std::string& config) {
    PlanOptions options;
    options.kernel_config = config;
    return flash.plan(p, options);
  };
  try {
    plan_with("q96-k96/neon");
    ADD_FAILURE() << "an unknown ISA was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Usage);
    EXPECT_STREQ(error.what(), "cpu-flash: kernel config 'q96-k96/neon': ISA 'neon' unknown; allowed: avx2, avx512");
  }
  EXPECT_THROW(plan_with("q7-k7/avx2"), Error);
  if (!cpu::cpu_supports(cpu::CpuIsa::Avx512)) {
    EXPECT_THROW(plan_with("q96-k96/avx512"), Error);
  }
  EXPECT_EQ(plan_with("q96-k96/avx2")->kernel_config(), "q96-k96/avx2");
}

}  // namespace
}  // namespace attnsuite
