// e4m3 as an input dtype: the dtype's names and sizes, per-tensor quantization, the reference on
// e4m3 views (= the reference on the dequantized fp32 values), the CPU backends that take e4m3
// against it, the refusals of every other backend, and a bench run with --dtype e4m3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "cli_test_support.hpp"
#include "core/reference.hpp"

namespace fs = std::filesystem;
using namespace attnsuite::testing_support;

namespace attnsuite {
namespace {

TEST(E4m3Dtype, NamesSizeAndOutputDtype) {
  for (const char* name : {"e4m3", "fp8", "float8_e4m3fn"}) EXPECT_EQ(parse_dtype(name), DType::E4M3) << name;
  EXPECT_FALSE(parse_dtype("e5m2").has_value());
  EXPECT_FALSE(parse_dtype("fp8_e4m3").has_value());
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::E4M3})
    EXPECT_EQ(parse_dtype(to_string(dtype)), dtype);
  EXPECT_EQ(to_string(DType::E4M3), "e4m3");
  EXPECT_EQ(size_of(DType::E4M3), 1u);
  EXPECT_EQ(output_dtype(DType::E4M3), DType::BF16);
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) EXPECT_EQ(output_dtype(dtype), dtype);

  AttentionProblem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 4;
  p.seq_q = p.seq_kv = 128;
  p.head_dim = 64;
  p.dtype = DType::E4M3;
  EXPECT_EQ(p.output_dtype(), DType::BF16);
  // Q, K, V one byte each, O two; FLOPs as for any dtype.
  EXPECT_EQ(p.min_bytes(), 3.0 * 2 * 4 * 128 * 64 + 2.0 * 2 * 4 * 128 * 64);
  AttentionProblem bf16 = p;
  bf16.dtype = DType::BF16;
  EXPECT_EQ(p.flops(), bf16.flops());
  EXPECT_NE(p.describe().find("e4m3"), std::string::npos) << p.describe();

  // Elements of an e4m3 buffer, and a view's real values.
  const std::uint8_t bytes[2] = {float_to_e4m3_bits(1.5f), float_to_e4m3_bits(-448.0f)};
  EXPECT_EQ(load_as_float(bytes, DType::E4M3, 0), 1.5f);
  EXPECT_EQ(load_as_float(bytes, DType::E4M3, 1), -448.0f);
  TensorView view;
  view.data = const_cast<std::uint8_t*>(bytes);
  view.dtype = DType::E4M3;
  view.descale = 0.25f;
  EXPECT_EQ(view.load(1), -112.0f);
  view.dtype = DType::F32;  // other dtypes hold their values as they are
  float values[1] = {3.0f};
  view.data = values;
  EXPECT_EQ(view.load(0), 3.0f);
}

TEST(E4m3Dtype, QuantizeScalesByTheAmaxOfTheTensor) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> values(4096);
  for (float& x : values) x = normal(rng);
  values[100] = -40.0f;  // the amax
  std::vector<std::uint8_t> bytes(values.size());
  const float descale = quantize_e4m3(values.data(), bytes.data(), values.size());
  EXPECT_EQ(descale, 40.0f / 448.0f);
  EXPECT_EQ(bytes[100], 0xfe);  // -448
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float back = e4m3_bits_to_float(bytes[i]) * descale;
    // Round to nearest: half a step of e4m3's 3-bit mantissa (2^-4 relative) in the normal
    // range, half the subnormal step (2^-10 · descale) below it.
    EXPECT_LE(std::abs(back - values[i]), std::max(std::abs(values[i]) * 0.0625f, descale * 0.001f)) << i;
    EXPECT_EQ(bytes[i], float_to_e4m3_bits(values[i] * (448.0f / 40.0f))) << i;
  }
  // Non-finite values leave the scale alone: Inf becomes NaN, NaN stays NaN.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> odd = {1.0f, -2.0f, inf, std::nanf(""), -inf};
  std::vector<std::uint8_t> odd_bytes(odd.size());
  EXPECT_EQ(quantize_e4m3(odd.data(), odd_bytes.data(), odd.size()), 2.0f / 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(odd_bytes[1]), -448.0f);
  for (std::size_t i = 2; i < odd.size(); ++i) EXPECT_TRUE(std::isnan(e4m3_bits_to_float(odd_bytes[i]))) << i;
  // All zero (or nothing finite): descale 1.
  std::vector<float> zeros(8, 0.0f);
  std::vector<std::uint8_t> zero_bytes(zeros.size(), 0xff);
  EXPECT_EQ(quantize_e4m3(zeros.data(), zero_bytes.data(), zeros.size()), 1.0f);
  for (std::uint8_t b : zero_bytes) EXPECT_EQ(b, 0);
}

// ---- the CPU backends on e4m3 inputs ------------------------------------------------------------

struct Tensor {
  std::vector<unsigned char> storage;
  TensorView view;
};

// A (b, s, h, d) tensor of `dtype` in `layout` with `padding` unused elements after each row
// (all-ones bytes: NaN in every dtype, so a backend that reads them fails).
Tensor make_tensor(std::array<std::int64_t, 4> shape, DType dtype, Layout layout, std::int64_t padding = 0) {
  std::array<std::int64_t, 4> padded = shape;
  padded[3] += padding;
  Tensor t;
  t.storage.assign(static_cast<std::size_t>(padded[0] * padded[1] * padded[2] * padded[3]) * size_of(dtype), 0xff);
  t.view.data = t.storage.data();
  t.view.dtype = dtype;
  t.view.shape = shape;
  t.view.strides = TensorView::dense_strides(padded, layout);
  return t;
}

template <class F>
void for_each_index(const TensorView& v, F&& body) {
  for (std::int64_t b = 0; b < v.shape[0]; ++b)
    for (std::int64_t s = 0; s < v.shape[1]; ++s)
      for (std::int64_t h = 0; h < v.shape[2]; ++h)
        for (std::int64_t d = 0; d < v.shape[3]; ++d) body(b, s, h, d);
}

// Normal(0, sigma) values quantized per tensor into an e4m3 tensor, and the same real values
// (e4m3 × descale, as TensorView::load computes them) in an fp32 tensor.
struct Pair {
  Tensor e4m3, f32;
};

Pair random_pair(std::array<std::int64_t, 4> shape, Layout layout, std::int64_t padding, float sigma,
                 std::uint64_t seed) {
  Pair pair{make_tensor(shape, DType::E4M3, layout, padding), make_tensor(shape, DType::F32, layout)};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> dense(static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
  for (float& x : dense) x = normal(rng);
  std::vector<std::uint8_t> bytes(dense.size());
  pair.e4m3.view.descale = quantize_e4m3(dense.data(), bytes.data(), dense.size());
  std::size_t i = 0;
  for_each_index(pair.e4m3.view, [&](auto b, auto s, auto h, auto d) {
    const std::uint8_t byte = bytes[i++];
    pair.e4m3.storage[static_cast<std::size_t>(pair.e4m3.view.offset(b, s, h, d))] = byte;
    static_cast<float*>(pair.f32.view.data)[pair.f32.view.offset(b, s, h, d)] =
        e4m3_bits_to_float(byte) * pair.e4m3.view.descale;
  });
  return pair;
}

AttentionProblem problem(int b, int hq, int hkv, int nq, int nk, int d, Layout layout, bool causal) {
  AttentionProblem p;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = nq;
  p.seq_kv = nk;
  p.head_dim = d;
  p.layout = layout;
  p.causal = causal;
  p.dtype = DType::E4M3;
  return p;
}

struct Case {
  AttentionProblem p;
  Pair q, k, v;
};

Case make_case(const AttentionProblem& p, std::int64_t padding, std::uint64_t seed) {
  return {p, random_pair({p.batch, p.seq_q, p.heads_q, p.head_dim}, p.layout, padding, 2.0f, seed),
          random_pair({p.batch, p.seq_kv, p.heads_kv, p.head_dim}, p.layout, padding, 1.0f, seed + 1),
          random_pair({p.batch, p.seq_kv, p.heads_kv, p.dim_v()}, p.layout, padding, 3.0f, seed + 2)};
}

TEST(E4m3Reference, EqualsTheReferenceOfTheDequantizedFp32Inputs) {
  for (const Layout layout : {Layout::BSHD, Layout::BHSD}) {
    const AttentionProblem p = problem(2, 4, 2, 37, 53, 64, layout, true);
    const Case c = make_case(p, layout == Layout::BSHD ? 16 : 0, 11);
    EXPECT_NE(c.q.e4m3.view.descale, 1.0f);
    AttentionArgs e4m3{c.q.e4m3.view, c.k.e4m3.view, c.v.e4m3.view, {}, {}, nullptr};
    AttentionArgs f32{c.q.f32.view, c.k.f32.view, c.v.f32.view, {}, {}, nullptr};
    AttentionProblem p32 = p;
    p32.dtype = DType::F32;
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads_q; ++h) {
        std::vector<double> out_e4m3(static_cast<std::size_t>(p.seq_q * p.dim_v())), out_f32(out_e4m3.size());
        std::vector<double> lse_e4m3(static_cast<std::size_t>(p.seq_q)), lse_f32(lse_e4m3.size());
        cpu::reference_head_f64(p, e4m3, b, h, out_e4m3.data(), lse_e4m3.data());
        cpu::reference_head_f64(p32, f32, b, h, out_f32.data(), lse_f32.data());
        EXPECT_EQ(out_e4m3, out_f32);
        EXPECT_EQ(lse_e4m3, lse_f32);
      }
  }
}

// reference, cpu-vanilla and cpu-flash on e4m3 Q, K, V (padded rows, both layouts, causal, GQA)
// write bf16 O: the fp64 result of the dequantized inputs rounded once to bf16, within one bf16
// rounding (2^-8 relative to the largest |O|) plus fp32 arithmetic; LSE within 1e-4.
TEST(E4m3CpuBackends, MatchTheReferenceOfTheDequantizedInputs) {
  struct Shape {
    int b, hq, hkv, nq, nk, d;
    Layout layout;
    bool causal;
    std::int64_t padding;
  };
  const Shape shapes[] = {{1, 2, 2, 33, 33, 64, Layout::BSHD, false, 0},
                          {2, 4, 2, 70, 129, 128, Layout::BHSD, true, 16},
                          {1, 3, 1, 129, 40, 32, Layout::BSHD, true, 8}};
  for (const Shape& s : shapes) {
    const AttentionProblem p = problem(s.b, s.hq, s.hkv, s.nq, s.nk, s.d, s.layout, s.causal);
    const Case c = make_case(p, s.padding, 5);
    AttentionProblem p32 = p;
    p32.dtype = DType::F32;
    AttentionArgs f32{c.q.f32.view, c.k.f32.view, c.v.f32.view, {}, {}, nullptr};
    std::vector<double> ref_out, ref_lse;
    for (int b = 0; b < p.batch; ++b)
      for (int h = 0; h < p.heads_q; ++h) {
        std::vector<double> out(static_cast<std::size_t>(p.seq_q * p.dim_v())), lse(static_cast<std::size_t>(p.seq_q));
        cpu::reference_head_f64(p32, f32, b, h, out.data(), lse.data());
        ref_out.insert(ref_out.end(), out.begin(), out.end());
        ref_lse.insert(ref_lse.end(), lse.begin(), lse.end());
      }
    double max_ref = 0.0;
    for (double x : ref_out) max_ref = std::max(max_ref, std::abs(x));
    for (const char* name : {"reference", "cpu-vanilla", "cpu-flash"}) {
      SCOPED_TRACE(std::string(name) + " " + p.describe());
      const Backend& backend = Registry::global().find(name);
      ASSERT_TRUE(backend.supports(p).ok) << backend.supports(p).reason;
      Tensor o = make_tensor({p.batch, p.seq_q, p.heads_q, p.dim_v()}, DType::BF16, p.layout, s.padding);
      std::vector<float> lse(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q), std::nanf(""));
      AttentionArgs args{c.q.e4m3.view, c.k.e4m3.view, c.v.e4m3.view, o.view, {lse.data(), {}}, nullptr};
      backend.forward(p, args, nullptr);
      double max_err = 0.0, lse_err = 0.0;
      std::size_t n = 0;
      for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.heads_q; ++h)
          for (int i = 0; i < p.seq_q; ++i) {
            for (int d = 0; d < p.dim_v(); ++d, ++n) {
              const double got = o.view.load(o.view.offset(b, i, h, d));
              max_err = std::max(
                  max_err, std::isnan(got) ? std::numeric_limits<double>::infinity() : std::abs(got - ref_out[n]));
            }
            const double want = ref_lse[static_cast<std::size_t>((b * p.heads_q + h) * p.seq_q + i)];
            const double got = lse[static_cast<std::size_t>((b * p.heads_q + h) * p.seq_q + i)];
            lse_err = std::max(lse_err, std::isinf(want) && want == got ? 0.0 : std::abs(got - want));
          }
      EXPECT_LE(max_err, max_ref * std::ldexp(1.0, -8) + 1e-4) << "largest |O| " << max_ref;
      EXPECT_LE(lse_err, 1e-4);
      // The padding after O's rows is never written (still all-ones bytes).
      if (s.padding > 0) {
        EXPECT_EQ(o.storage.back(), 0xff);
      }
    }
  }
}

// Every backend but those that take e4m3 refuses it with a reason naming the dtype; none has an
// e4m3 backward; the CPU backends' backward functions refuse it too.
TEST(E4m3CpuBackends, OthersRefuseWithAReason) {
  const std::set<std::string> takes = {"reference", "cpu-vanilla", "cpu-flash", "flash3-fp8"};
  const AttentionProblem p = problem(1, 2, 2, 64, 64, 64, Layout::BSHD, false);
  for (const std::string& name : Registry::global().names()) {
    SCOPED_TRACE(name);
    const Backend& backend = Registry::global().find(name);
    const Support forward = backend.supports(p);
    const Support backward = backend.supports_backward(p);
    EXPECT_FALSE(backward.ok);
    if (takes.count(name) > 0) {
      if (backend.device().type == DeviceType::Cpu) {
        EXPECT_TRUE(forward.ok) << forward.reason;
        EXPECT_EQ(backward.reason,
                  "e4m3 has no backward: e4m3 inputs are for inference (the gradients would need "
                  "a dtype and scales of their own)");
      }
      continue;
    }
    EXPECT_FALSE(forward.ok);
    // GPU backends on a machine without one may say that first.
    if (backend.device().type == DeviceType::Cpu) {
      EXPECT_NE(forward.reason.find("e4m3"), std::string::npos) << forward.reason;
    }
  }
  const Support sparge = Registry::global().find("cpu-sparge").supports(p);
  EXPECT_EQ(sparge.reason,
            "dtype e4m3 not supported; allowed: fp32, fp16, bf16 (e4m3 runs on reference, cpu-vanilla and cpu-flash)");
  // plan() refuses what supports() refuses, with the backend's name.
  try {
    (void)Registry::global().find("cpu-sparge").plan(p, {});
    ADD_FAILURE() << "cpu-sparge planned an e4m3 problem";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(error.what()).find("cpu-sparge: dtype e4m3 not supported"), std::string::npos)
        << error.what();
  }
}

// ---- the bench ----------------------------------------------------------------------------------

// bench --dtype e4m3: rows with dtype e4m3; the reference reads the dequantized inputs, so the
// CPU backends' error is bf16's rounding of O (rel L2 ~1e-3), far below e4m3's own (~4e-2 on
// Gaussian inputs); backends without e4m3 are skipped with their reason.
TEST(E4m3Bench, CpuRowsSayE4m3AndMeasureTheKernelNotTheQuantization) {
  const fs::path out = scratch("e4m3-bench");
  const CliResult r = run_cli({"bench",
                               "--backends",
                               "reference,cpu-vanilla,cpu-flash,cpu-sparge",
                               "--dtype",
                               "fp8",
                               "--batch",
                               "1",
                               "--seq",
                               "96",
                               "--heads",
                               "2",
                               "--kv-heads",
                               "1",
                               "--head-dim",
                               "64",
                               "--causal",
                               "both",
                               "--layout",
                               "bhsd",
                               "--min-reps",
                               "2",
                               "--max-time-ms",
                               "5",
                               "--hot",
                               "--quiet",
                               "--out",
                               out.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("8 cases: 6 ok, 2 skipped, 0 failed"), std::string::npos) << r.out;
  const auto json = nlohmann::json::parse(slurp(out / "results.json"));
  ASSERT_EQ(json["rows"].size(), 8u);
  for (const auto& row : json["rows"]) {
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row["dtype"], "e4m3");
    if (row["backend"] == "cpu-sparge") {
      EXPECT_EQ(row["status"], "skipped");
      EXPECT_NE(row["reason"].get<std::string>().find("dtype e4m3 not supported"), std::string::npos);
      continue;
    }
    EXPECT_EQ(row["status"], "ok");
    EXPECT_LT(row["rel_l2"].get<double>(), 5e-3);
    EXPECT_GT(row["cos_sim"].get<double>(), 0.99999);
    EXPECT_GT(row["tflops"].get<double>(), 0.0);
  }
  EXPECT_NE(slurp(out / "results.csv").find(",e4m3,"), std::string::npos);
  fs::remove_all(out);
}

TEST(E4m3Bench, SuiteDtypeNamesAndTheirErrors) {
  const fs::path dir = scratch("e4m3-suite");
  const fs::path suite = dir / "fp8.json";
  fs::create_directories(dir);
  {
    std::ofstream file(suite);
    file << R"({"name": "fp8", "backends": ["cpu-flash"], "dtype": ["float8_e4m3fn"], "batch": [1], "seq": [40],
                "heads": [2], "head_dim": [32]})";
  }
  const CliResult ok = run_cli({"bench", "--suite", suite.string(), "--min-reps", "2", "--max-time-ms", "5", "--hot",
                                "--quiet", "--out", (dir / "out").string()});
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("1 cases: 1 ok"), std::string::npos) << ok.out;
  const CliResult bad =
      run_cli({"bench", "--backends", "cpu-flash", "--dtype", "e5m2", "--quiet", "--out", (dir / "bad").string()});
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(count_lines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("allowed: fp32, fp16, bf16, e4m3"), std::string::npos) << bad.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attnsuite
