// Defined numerics, for every backend in the registry (the CUDA ones skip without a GPU):
//
// - NaN in the inputs reaches exactly the outputs whose defining sum includes it, as in
//   PyTorch: a NaN in a query row makes that row (O and LSE) NaN; a NaN in key j makes every
//   row that attends key j NaN; a NaN in V[j][c] makes column c of the rows that attend key j
//   NaN and leaves their other columns and LSE alone. +Inf in V[j][c] makes that column +Inf
//   (NaN for flash3-fp8: e4m3 has no infinity); +Inf in a query makes its row NaN (a score of
//   +Inf gives Inf/Inf in the softmax).
//   Rows and heads that do not involve the value are bit for bit what they are without it.
// - A row that sees no key (causal with seq_q > seq_kv, a window) is O = 0 exactly and
//   LSE = -inf, whatever V holds.
//
// The rules are attnsuite's contract, so they are checked on attnsuite's backends. A peer keeps
// its library's numerics: on the H200 (PyTorch 2.11, 2026-12-02) torch-flash writes LSE -inf
// for a NaN row, torch-math's additive mask turns every row of a head NaN for one NaN key, and
// torch-sdpa/torch-efficient give NaN instead of +Inf for +Inf in V; docs/reliability.md.
//
// What stays unspecified, as between PyTorch's own SDPA backends: a NaN or Inf in V at a key
// that a row does not attend may or may not reach that row (0·NaN in a P·V product over a
// masked key — PyTorch's math backend and FlashAttention's tiles both let it through), and a
// row whose every score is -inf (from -Inf inputs) is NaN for the reference and cpu-vanilla
// but read as fully masked (O = 0) by the tiled kernels. docs/reliability.md has the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/device_context.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Q, K, V as logical (batch, seq, heads, dim) float values; packed in the problem's dtype and
// layout when run.
struct Values {
  std::vector<float> q, k, v;
};

std::int64_t index(std::int64_t seq, std::int64_t heads, std::int64_t dim, std::int64_t b, std::int64_t s,
                   std::int64_t h, std::int64_t d) {
  return ((b * seq + s) * heads + h) * dim + d;
}

Values random_values(const AttentionProblem& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::int64_t count) {
    std::vector<float> values(static_cast<std::size_t>(count));
    for (auto& value : values) value = normal(rng);
    return values;
  };
  return {fill(std::int64_t{p.batch} * p.seq_q * p.heads_q * p.head_dim),
          fill(std::int64_t{p.batch} * p.seq_kv * p.heads_kv * p.head_dim),
          fill(std::int64_t{p.batch} * p.seq_kv * p.heads_kv * p.dim_v())};
}

struct Output {
  std::vector<float> o;    // logical (batch, seq_q, heads_q, dim_v)
  std::vector<float> lse;  // (batch, heads_q, seq_q); empty when the backend gives none
};

// Runs a backend through the harness's device context (so the same code runs CPU and CUDA
// backends) and reads O and LSE back as floats.
Output run(const Backend& backend, const AttentionProblem& p, const Values& in) {
  const Device device = backend.device();
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, {});
  auto ctx = bench::make_device_context(device);
  const std::size_t element = size_of(p.dtype);
  std::vector<std::unique_ptr<bench::DeviceAllocation>> keep;
  auto upload = [&](const std::vector<float>& values, std::array<std::int64_t, 4> shape) {
    TensorView view;
    view.dtype = p.dtype;
    view.device = device;
    view.shape = shape;
    view.strides = TensorView::dense_strides(shape, p.layout);
    std::vector<unsigned char> bytes(values.size() * element);
    std::int64_t n = 0;
    for (std::int64_t b = 0; b < shape[0]; ++b)
      for (std::int64_t s = 0; s < shape[1]; ++s)
        for (std::int64_t h = 0; h < shape[2]; ++h)
          for (std::int64_t d = 0; d < shape[3]; ++d)
            store_from_float(bytes.data(), p.dtype, view.offset(b, s, h, d), values[n++]);
    keep.push_back(ctx->allocate(bytes.size()));
    ctx->copy_to_device(keep.back()->data(), bytes.data(), bytes.size());
    view.data = keep.back()->data();
    return view;
  };
  AttentionArgs args;
  args.q = upload(in.q, {p.batch, p.seq_q, p.heads_q, p.head_dim});
  args.k = upload(in.k, {p.batch, p.seq_kv, p.heads_kv, p.head_dim});
  args.v = upload(in.v, {p.batch, p.seq_kv, p.heads_kv, p.dim_v()});
  const std::array<std::int64_t, 4> o_shape{p.batch, p.seq_q, p.heads_q, p.dim_v()};
  const std::size_t o_elements = static_cast<std::size_t>(p.batch) * p.seq_q * p.heads_q * p.dim_v();
  const std::size_t lse_elements = static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q;
  if (!plan->produces_own_output()) {
    keep.push_back(ctx->allocate(o_elements * element));
    ctx->poison(keep.back()->data(), o_elements * element);
    args.o = args.q;
    args.o.data = keep.back()->data();
    args.o.shape = o_shape;
    args.o.strides = TensorView::dense_strides(o_shape, p.layout);
    keep.push_back(ctx->allocate(lse_elements * sizeof(float)));
    ctx->poison(keep.back()->data(), lse_elements * sizeof(float));
    args.lse = {static_cast<float*>(keep.back()->data()), device};
  }
  if (const std::size_t workspace = plan->workspace_bytes(); workspace > 0) {
    keep.push_back(ctx->allocate(workspace));
    args.workspace = keep.back()->data();
  }
  const RunReport report = plan->forward(args, ctx->stream());
  ctx->synchronize();

  const TensorView o = plan->produces_own_output() ? report.output : args.o;
  const LseView lse = plan->produces_own_output() ? report.output_lse : args.lse;
  EXPECT_TRUE(!o.empty() && o.shape == o_shape && o.dtype == p.dtype);
  std::int64_t span = 1;
  for (int dim = 0; dim < 4; ++dim) span += (o.shape[dim] - 1) * o.strides[dim];
  std::vector<unsigned char> host(static_cast<std::size_t>(span) * element);
  ctx->copy_to_host(host.data(), o.data, host.size());
  Output out;
  out.o.reserve(o_elements);
  for (std::int64_t b = 0; b < o_shape[0]; ++b)
    for (std::int64_t s = 0; s < o_shape[1]; ++s)
      for (std::int64_t h = 0; h < o_shape[2]; ++h)
        for (std::int64_t d = 0; d < o_shape[3]; ++d)
          out.o.push_back(load_as_float(host.data(), p.dtype, o.offset(b, s, h, d)));
  if (!lse.empty()) {
    out.lse.resize(lse_elements);
    ctx->copy_to_host(out.lse.data(), lse.data, lse_elements * sizeof(float));
  }
  return out;
}

// sage and sage2 quantize per block: a NaN or Inf in Q sets the scale of its Q block, one in K
// the smooth-K mean of its (batch, kv head), one in V (sage2) its channel's FP8 scale. There the
// rule is coarser: the outputs the value reaches are NaN as for every backend, and other rows of
// the same head may be NaN too (docs/reliability.md, docs/kernels/sage.md).
// sparge-sage runs sage2's quantizers (smooth-K: a NaN key makes its kv head's channel mean NaN).
bool block_quantized(const std::string& backend) {
  return backend == "sage" || backend == "sage2" || backend == "sparge-sage";
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

class Numerics : public ::testing::TestWithParam<std::string> {
 protected:
  // The backend, and the problem in the first dtype it takes (fp32, else fp16, else bf16);
  // skips (with the backend's reason) where it takes none, or where there is no GPU for it.
  bool pick(AttentionProblem& p) {
    backend_ = &Registry::global().find(GetParam());
    if (!backend_->peer_of().empty()) {
      skip_reason_ = GetParam() + " is a peer (" + std::string(backend_->peer_of()) +
                     "): its numerics are its library's own (docs/reliability.md lists what they do)";
      return false;
    }
#if ATTNSUITE_HAVE_CUDA
    if (backend_->device().type == DeviceType::Cuda) {
      const std::string missing = testing_support::cuda_device_missing();
      if (!missing.empty()) {
        skip_reason_ = "no CUDA device: " + missing;
        return false;
      }
    }
#endif
    std::string reason;
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      p.dtype = dtype;
      const Support support = backend_->supports(p);
      if (support) return true;
      reason = support.reason;
    }
    skip_reason_ = GetParam() + " does not run " + p.describe() + ": " + reason;
    return false;
  }
  Backend* backend_ = nullptr;
  std::string skip_reason_;
};

#define PICK_OR_SKIP(problem)                         \
  do {                                                \
    if (!pick(problem)) GTEST_SKIP() << skip_reason_; \
  } while (0)

AttentionProblem problem(int seq_q, int seq_kv, bool causal) {
  AttentionProblem p;
  p.batch = 1;
  p.heads_q = 2;
  p.heads_kv = 2;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.head_dim = 64;
  p.causal = causal;
  return p;
}

TEST_P(Numerics, NanInAQueryRowMakesThatRowNan) {
  AttentionProblem p = problem(40, 40, false);
  PICK_OR_SKIP(p);
  Values in = random_values(p, 1);
  const Output clean = run(*backend_, p, in);
  const std::int64_t row = 17, head = 1;
  in.q[index(p.seq_q, p.heads_q, p.head_dim, 0, row, head, 3)] = kNaN;
  const Output got = run(*backend_, p, in);
  for (std::int64_t s = 0; s < p.seq_q; ++s)
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const bool hit = s == row && h == head;
      for (std::int64_t d = 0; d < p.dim_v(); ++d) {
        const auto n = index(p.seq_q, p.heads_q, p.dim_v(), 0, s, h, d);
        if (hit) {
          ASSERT_TRUE(std::isnan(got.o[n])) << "O[" << s << "][" << h << "][" << d << "] = " << got.o[n];
        } else if (!(block_quantized(GetParam()) && h == head)) {
          ASSERT_TRUE(same_bits(got.o[n], clean.o[n])) << "row " << s << " head " << h << " changed";
        }
      }
      if (!got.lse.empty()) {
        const float lse = got.lse[h * p.seq_q + s];
        if (hit) {
          EXPECT_TRUE(std::isnan(lse)) << lse;
        } else if (!(block_quantized(GetParam()) && h == head)) {
          EXPECT_TRUE(same_bits(lse, clean.lse[h * p.seq_q + s]));
        }
      }
    }
}

TEST_P(Numerics, NanInAKeyMakesTheRowsThatSeeItNan) {
  AttentionProblem p = problem(40, 40, true);  // rows >= key see it, rows before do not
  PICK_OR_SKIP(p);
  Values in = random_values(p, 2);
  const Output clean = run(*backend_, p, in);
  const std::int64_t key = 20, kv_head = 0;
  in.k[index(p.seq_kv, p.heads_kv, p.head_dim, 0, key, kv_head, 7)] = kNaN;
  const Output got = run(*backend_, p, in);
  for (std::int64_t s = 0; s < p.seq_q; ++s)
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const bool sees = p.kv_head_of(static_cast<int>(h)) == kv_head && p.key_begin(s) <= key && key < p.key_end(s);
      if (!sees && block_quantized(GetParam()) && p.kv_head_of(static_cast<int>(h)) == kv_head) continue;
      for (std::int64_t d = 0; d < p.dim_v(); ++d) {
        const auto n = index(p.seq_q, p.heads_q, p.dim_v(), 0, s, h, d);
        if (sees) {
          ASSERT_TRUE(std::isnan(got.o[n])) << "O[" << s << "][" << h << "][" << d << "] = " << got.o[n];
        } else {
          ASSERT_TRUE(same_bits(got.o[n], clean.o[n])) << "row " << s << " head " << h << " does not see key " << key;
        }
      }
      if (!got.lse.empty()) {
        const float lse = got.lse[h * p.seq_q + s];
        if (sees) {
          EXPECT_TRUE(std::isnan(lse)) << "row " << s << " LSE " << lse;
        } else {
          EXPECT_TRUE(same_bits(lse, clean.lse[h * p.seq_q + s])) << "row " << s;
        }
      }
    }
}

// NaN and +Inf in one element of V: only that column of the rows that see its key.
void check_value_column(Backend& backend, const AttentionProblem& p, float poison_value, bool (*expected)(float)) {
  Values in = random_values(p, 3);
  const Output clean = run(backend, p, in);
  const std::int64_t key = 20, kv_head = 1, column = 5;
  in.v[index(p.seq_kv, p.heads_kv, p.dim_v(), 0, key, kv_head, column)] = poison_value;
  const Output got = run(backend, p, in);
  for (std::int64_t s = 0; s < p.seq_q; ++s)
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const bool same_head = p.kv_head_of(static_cast<int>(h)) == kv_head;
      const bool sees = same_head && p.key_begin(s) <= key && key < p.key_end(s);
      // Rows of this kv head that do not see the key are unspecified (see the file comment).
      if (same_head && !sees) continue;
      // sage2: the NaN/Inf sets its channel's FP8 scale for the whole kv head.
      if (same_head && block_quantized(std::string(backend.name()))) {
        ASSERT_TRUE(expected(got.o[index(p.seq_q, p.heads_q, p.dim_v(), 0, s, h, column)]));
        continue;
      }
      for (std::int64_t d = 0; d < p.dim_v(); ++d) {
        const auto n = index(p.seq_q, p.heads_q, p.dim_v(), 0, s, h, d);
        if (sees && d == column) {
          ASSERT_TRUE(expected(got.o[n])) << "O[" << s << "][" << h << "][" << d << "] = " << got.o[n];
        } else {
          ASSERT_TRUE(same_bits(got.o[n], clean.o[n])) << "O[" << s << "][" << h << "][" << d << "] changed";
        }
      }
      if (!got.lse.empty()) {
        EXPECT_TRUE(same_bits(got.lse[h * p.seq_q + s], clean.lse[h * p.seq_q + s]));
      }
    }
}

TEST_P(Numerics, NanInAValueMakesItsColumnNan) {
  AttentionProblem p = problem(40, 40, true);
  PICK_OR_SKIP(p);
  check_value_column(*backend_, p, kNaN, [](float x) { return std::isnan(x); });
}

TEST_P(Numerics, InfInAValueMakesItsColumnInf) {
  AttentionProblem p = problem(40, 40, false);
  PICK_OR_SKIP(p);
  // flash3-fp8 computes on e4m3, which has no infinity: its quantization turns ±Inf into NaN
  // (never into a finite value), so the column is NaN there — as for sage2 and sparge-sage (sage2's
  // FP8 P·V); everything else is as for the rest.
  if (GetParam() == "flash3-fp8" || GetParam() == "sage2" || GetParam() == "sparge-sage") {
    check_value_column(*backend_, p, kInf, [](float x) { return std::isnan(x); });
    return;
  }
  check_value_column(*backend_, p, kInf, [](float x) { return x == kInf; });
}

TEST_P(Numerics, InfInAQueryMakesThatRowNan) {
  AttentionProblem p = problem(40, 40, false);
  PICK_OR_SKIP(p);
  Values in = random_values(p, 4);
  const std::int64_t row = 9, head = 0, dim = 11;
  in.q[index(p.seq_q, p.heads_q, p.head_dim, 0, row, head, dim)] = kInf;
  // Some key has K[j][dim] > 0, so that row's largest score is +Inf.
  bool positive = false;
  for (std::int64_t j = 0; j < p.seq_kv; ++j)
    positive |= in.k[index(p.seq_kv, p.heads_kv, p.head_dim, 0, j, head, dim)] > 0;
  ASSERT_TRUE(positive);
  const Output got = run(*backend_, p, in);
  for (std::int64_t d = 0; d < p.dim_v(); ++d)
    ASSERT_TRUE(std::isnan(got.o[index(p.seq_q, p.heads_q, p.dim_v(), 0, row, head, d)])) << "dim " << d;
  if (!got.lse.empty()) {
    EXPECT_TRUE(std::isnan(got.lse[head * p.seq_q + row]));
  }
  for (std::int64_t n = 0; n < static_cast<std::int64_t>(got.o.size()); ++n) {
    const std::int64_t s = n / p.dim_v() / p.heads_q, h = n / p.dim_v() % p.heads_q;
    if ((s != row || h != head) && !(block_quantized(GetParam()) && h == head)) {
      ASSERT_TRUE(std::isfinite(got.o[n])) << "element " << n;
    }
  }
}

// Rows that see no key: O = 0 exactly and LSE = -inf, whatever V holds (NaN and Inf included).
void check_fully_masked(Backend& backend, const AttentionProblem& p, bool non_finite_values) {
  Values in = random_values(p, 5);
  if (non_finite_values) {
    for (std::int64_t j = 0; j < p.seq_kv; j += 3)
      in.v[index(p.seq_kv, p.heads_kv, p.dim_v(), 0, j, 0, j % p.dim_v())] = kNaN;
    in.v[index(p.seq_kv, p.heads_kv, p.dim_v(), 0, 1, 1, 2)] = kInf;
  }
  const Output got = run(backend, p, in);
  std::int64_t masked = 0;
  for (std::int64_t s = 0; s < p.seq_q; ++s) {
    if (p.key_begin(s) < p.key_end(s)) continue;
    ++masked;
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      for (std::int64_t d = 0; d < p.dim_v(); ++d) {
        const float value = got.o[index(p.seq_q, p.heads_q, p.dim_v(), 0, s, h, d)];
        ASSERT_EQ(value, 0.0f) << "masked row " << s << " head " << h << " dim " << d;
      }
      if (!got.lse.empty()) {
        EXPECT_EQ(got.lse[h * p.seq_q + s], -kInf) << "masked row " << s << " head " << h;
      }
    }
  }
  EXPECT_GT(masked, 0) << p.describe() << " has no fully masked row";
}

TEST_P(Numerics, FullyMaskedRowsAreZeroWithLseMinusInf) {
  AttentionProblem causal = problem(40, 16, true);  // rows 0..23 see no key
  PICK_OR_SKIP(causal);
  check_fully_masked(*backend_, causal, false);
}

TEST_P(Numerics, FullyMaskedRowsStayZeroWhateverVHolds) {
  AttentionProblem causal = problem(40, 16, true);
  PICK_OR_SKIP(causal);
  check_fully_masked(*backend_, causal, true);
}

TEST_P(Numerics, WindowedRowsThatSeeNoKeyAreZero) {
  AttentionProblem window = problem(48, 20, false);
  window.window_left = 2;
  window.window_right = 0;  // rows 0..27 end before key 0
  PICK_OR_SKIP(window);
  check_fully_masked(*backend_, window, true);
}

std::string name_of(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, Numerics, ::testing::ValuesIn(Registry::global().names()), name_of);

}  // namespace
}  // namespace attnsuite
