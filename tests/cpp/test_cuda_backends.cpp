// The CUDA backends (cuda-vanilla, flash2, and flash3 in builds with -DATTNSUITE_FLASH3=ON)
// against an fp64 CPU reference written here, on
// fresh random inputs, every element compared. The bound is dtype-aware: a backend may be off
// the fp64 result by at most twice what a naive implementation in the same dtype is off (inputs
// in that dtype, fp32 accumulation, P rounded to the dtype before P·V, output rounded; scores
// rounded too for cuda-vanilla, which materializes them in the dtype by design), plus a floor of
// a few output ulps. Outputs are poisoned with NaN before every run; NaN never passes.
//
// Tests that need a GPU skip with "no CUDA device: <reason>" where there is none; the
// supports() refusals and the no-device behaviour run everywhere.
#if ATTNSUITE_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "attnsuite/device_context.hpp"
#include "bench/generators.hpp"
#include "cuda/cuda_backends.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

struct DeviceRun {
  std::vector<std::uint16_t> out_bits;  // in the layout of Q
  std::vector<float> lse;
  std::string kernel_config;  // RunReport::kernel_config of the run
};

// PlanOptions with kernel config `config` ("": the backend's choice).
PlanOptions with_config(const std::string& config) {
  PlanOptions options;
  options.kernel_config = config;
  return options;
}

// Copies the inputs to the GPU, poisons O and LSE, plans and runs the backend, copies back.
DeviceRun run_on_device(const std::string& backend_name, const AttentionProblem& p, const Inputs& in,
                        const PlanOptions& options = {}) {
  auto context = cuda::make_cuda_context(0);
  const Backend& backend = Registry::global().find(backend_name);
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, options);
  const HostTensor o_layout({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  auto q = context->allocate(in.q.bytes()), k = context->allocate(in.k.bytes()),
       v = context->allocate(in.v.bytes()), o = context->allocate(o_layout.bytes());
  const std::size_t lse_bytes = sizeof(float) * p.batch * p.heads_q * p.seq_q;
  auto lse = context->allocate(lse_bytes);
  context->copy_to_device(q->data(), in.q.bits.data(), in.q.bytes());
  context->copy_to_device(k->data(), in.k.bits.data(), in.k.bytes());
  context->copy_to_device(v->data(), in.v.bits.data(), in.v.bytes());
  context->poison(o->data(), o_layout.bytes());
  context->poison(lse->data(), lse_bytes);

  const Device device = context->device();
  auto view = [&](void* data, const HostTensor& t) { return TensorView{data, p.dtype, device, t.shape, t.strides}; };
  AttentionArgs args;
  args.q = view(q->data(), in.q);
  args.k = view(k->data(), in.k);
  args.v = view(v->data(), in.v);
  args.o = view(o->data(), o_layout);
  args.lse = LseView{static_cast<float*>(lse->data()), device};
  // Backends with a workspace (flash3-fp8: the e4m3 copies) get one, as the bench runner does.
  const std::size_t workspace_bytes = plan->workspace_bytes();
  std::unique_ptr<bench::DeviceAllocation> workspace;
  if (workspace_bytes > 0) {
    workspace = context->allocate(workspace_bytes);
    args.workspace = workspace->data();
  }
  const RunReport report = plan->forward(args, context->stream());
  context->synchronize();

  DeviceRun run{std::vector<std::uint16_t>(o_layout.bits.size()), std::vector<float>(p.batch * p.heads_q * p.seq_q),
                report.kernel_config};
  context->copy_to_host(run.out_bits.data(), o->data(), o_layout.bytes());
  context->copy_to_host(run.lse.data(), lse->data(), lse_bytes);
  return run;
}

// Checks one backend on one problem with fresh random inputs; returns the kernel config that ran.
std::string check_backend(const std::string& backend_name, const AttentionProblem& p, const PlanOptions& options = {}) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(backend_name + " " + p.describe() + " seed " + std::to_string(seed));
  const Backend& backend = Registry::global().find(backend_name);
  const Support support = backend.supports(p);
  EXPECT_TRUE(support.ok) << support.reason;
  if (!support.ok) return {};

  const Inputs in = random_inputs(p, seed);
  const DeviceRun run = run_on_device(backend_name, p, in, options);
  const Result ref = reference_f64(p, in);
  const Result naive = naive_same_dtype(p, in, /*round_scores=*/backend_name == "cuda-vanilla");

  // The device output, read through Q's layout into (b, h, i, d) order.
  const HostTensor o_layout({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  std::vector<double> got(ref.out.size());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        for (std::int64_t d = 0; d < p.dim_v(); ++d)
          got[out_index(p, b, h, i) + d] = load_as_float(run.out_bits.data(), p.dtype, o_layout.offset(b, i, h, d));

  const ErrorStats err = compare(got, ref.out);
  const ErrorStats naive_err = compare(naive.out, ref.out);
  // Two ulps of the output dtype at the largest |output| (matters only where the naive error
  // is ~0, e.g. one key per row).
  const double epsilon = p.dtype == DType::F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  const double floor = 2.0 * epsilon * std::exp2(std::floor(std::log2(std::max(max_abs(ref.out), 1.0 / 16))));
  const double bound = 2.0 * naive_err.max_abs + floor;
  EXPECT_EQ(err.nan_count, 0) << "NaN (poison never overwritten, or computed) in O";
  EXPECT_LE(err.max_abs, bound) << "O max abs err " << err.max_abs << " (mean " << err.mean_abs
                                << ") at flat index " << err.worst_index << "; naive " << to_string(p.dtype)
                                << " max err " << naive_err.max_abs << ", floor " << floor;

  // LSE: -inf exactly where the row sees no key, else within the same kind of bound.
  std::vector<double> lse_got(run.lse.begin(), run.lse.end());
  std::int64_t inf_mismatch = 0;
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    const bool ref_empty = std::isinf(ref.lse[i]);
    const bool got_empty = std::isinf(lse_got[i]) && lse_got[i] < 0;
    if (ref_empty != got_empty) ++inf_mismatch;
    if (ref_empty && got_empty) lse_got[i] = ref.lse[i];
  }
  std::vector<double> naive_lse = naive.lse;
  for (std::size_t i = 0; i < ref.lse.size(); ++i)
    if (std::isinf(ref.lse[i])) naive_lse[i] = ref.lse[i];
  EXPECT_EQ(inf_mismatch, 0) << "rows whose LSE is -inf in one of reference and backend only";
  std::vector<double> finite_ref = ref.lse, finite_got = lse_got, finite_naive = naive_lse;
  for (std::size_t i = 0; i < ref.lse.size(); ++i)
    if (std::isinf(ref.lse[i])) finite_ref[i] = finite_got[i] = finite_naive[i] = 0.0;
  const ErrorStats lse_err = compare(finite_got, finite_ref);
  const ErrorStats naive_lse_err = compare(finite_naive, finite_ref);
  const double lse_bound = 2.0 * naive_lse_err.max_abs + 1e-4 * std::max(1.0, max_abs(finite_ref));
  EXPECT_EQ(lse_err.nan_count, 0) << "NaN in LSE";
  EXPECT_LE(lse_err.max_abs, lse_bound) << "LSE max abs err " << lse_err.max_abs << " at row "
                                        << lse_err.worst_index << "; naive " << naive_lse_err.max_abs;
  std::printf("  %-13s %-58s O max err %.3g (naive %.3g, bound %.3g)  LSE max err %.3g\n", backend_name.c_str(),
              p.describe().c_str(), err.max_abs, naive_err.max_abs, bound, lse_err.max_abs);
  return run.kernel_config;
}

class CudaBackendTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaBackendTest, SequenceLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int seq : {1, 7, 33, 1000, 4097})
    for (bool causal : {false, true})
      check_backend(GetParam(), make_problem(seq > 1000 ? 1 : 2, 2, 2, seq, seq, 64, DType::F16, Layout::BSHD, causal));
}

TEST_P(CudaBackendTest, HeadDimsAndDtypes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : {DType::F16, DType::BF16})
    for (int head_dim : {64, 128, 256})
      for (int seq : {33, 300})
        check_backend(GetParam(), make_problem(2, 2, 2, seq, seq, head_dim, dtype, Layout::BSHD, seq == 300));
}

TEST_P(CudaBackendTest, CausalWithDifferentQueryAndKeyLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // seq_q < seq_kv: every row sees a prefix longer than itself; seq_q > seq_kv: the first
  // seq_q - seq_kv rows see no key at all (O = 0, LSE = -inf).
  check_backend(GetParam(), make_problem(2, 2, 2, 100, 300, 128, DType::BF16, Layout::BSHD, true));
  check_backend(GetParam(), make_problem(2, 2, 2, 300, 100, 128, DType::BF16, Layout::BSHD, true));
  check_backend(GetParam(), make_problem(1, 2, 2, 77, 1000, 64, DType::F16, Layout::BHSD, true));
  check_backend(GetParam(), make_problem(1, 2, 2, 1000, 77, 256, DType::F16, Layout::BSHD, false));
}

TEST_P(CudaBackendTest, GroupedAndMultiQueryHeads) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_backend(GetParam(), make_problem(2, 8, 2, 257, 257, 64, DType::F16, Layout::BSHD, false));
  check_backend(GetParam(), make_problem(2, 8, 2, 257, 257, 128, DType::BF16, Layout::BHSD, true));
  check_backend(GetParam(), make_problem(2, 4, 1, 190, 190, 128, DType::F16, Layout::BSHD, true));
  check_backend(GetParam(), make_problem(1, 4, 1, 65, 130, 256, DType::BF16, Layout::BHSD, false));
}

TEST_P(CudaBackendTest, BhsdLayout) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_backend(GetParam(), make_problem(2, 3, 3, 513, 513, 128, DType::BF16, Layout::BHSD, true));
  check_backend(GetParam(), make_problem(3, 2, 2, 200, 333, 64, DType::F16, Layout::BHSD, false));
}

TEST_P(CudaBackendTest, SlidingWindowWithFullyMaskedRows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // diag = i - 50: rows 0..45 have diag + 4 < 0 and see no key.
  AttentionProblem p = make_problem(2, 2, 2, 200, 150, 64, DType::F16, Layout::BSHD, false);
  p.window_left = 16;
  p.window_right = 4;
  check_backend(GetParam(), p);
  // A two-sided window on a long sequence: tiles on both sides of the band are skipped.
  p = make_problem(1, 2, 2, 1000, 1000, 128, DType::BF16, Layout::BSHD, false);
  p.window_left = 100;
  p.window_right = 37;
  check_backend(GetParam(), p);
  // Causal plus a left window (local attention), GQA.
  p = make_problem(1, 4, 2, 700, 700, 64, DType::BF16, Layout::BHSD, true);
  p.window_left = 129;
  check_backend(GetParam(), p);
}

const std::vector<std::string> kCudaBackends = {"cuda-vanilla", "flash2",
#if ATTNSUITE_HAVE_FLASH3
                                                 "flash3",
#endif
};

INSTANTIATE_TEST_SUITE_P(Cuda, CudaBackendTest, ::testing::ValuesIn(kCudaBackends),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param == "cuda-vanilla" ? std::string("vanilla") : param_info.param;
                         });

TEST(CudaFlash2, Deterministic) {
  SKIP_WITHOUT_CUDA_DEVICE();
  AttentionProblem p = make_problem(2, 4, 2, 1000, 1000, 128, DType::BF16, Layout::BSHD, true);
  const Inputs in = random_inputs(p, std::random_device{}());
  const DeviceRun first = run_on_device("flash2", p, in);
  const DeviceRun second = run_on_device("flash2", p, in);
  EXPECT_EQ(std::memcmp(first.out_bits.data(), second.out_bits.data(), first.out_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4), 0);
}

// Every kernel configuration `tune --kernels` can choose (configs.hpp), on odd shapes: causal
// with seq_q != seq_kv, GQA, one row, both dtypes.
TEST(CudaFlash2, EveryKernelConfigMatchesTheReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& flash2 = Registry::global().find("flash2");
  for (int head_dim : {64, 128}) {
    const std::vector<std::string> configs =
        flash2.kernel_configs(make_problem(1, 2, 2, 64, 64, head_dim, DType::BF16, Layout::BSHD, false));
    ASSERT_GE(configs.size(), 2u) << "d" << head_dim;
    for (const std::string& config : configs) {
      const PlanOptions options = with_config(config);
      SCOPED_TRACE("config " + config);
      for (const AttentionProblem& p : {make_problem(2, 4, 2, 1000, 333, head_dim, DType::BF16, Layout::BSHD, true),
                                        make_problem(1, 3, 3, 1, 77, head_dim, DType::F16, Layout::BHSD, false),
                                        make_problem(1, 2, 1, 200, 40, head_dim, DType::F16, Layout::BSHD, true)})
        EXPECT_EQ(check_backend("flash2", p, options), config);
    }
  }
  const AttentionProblem p = make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false);
  EXPECT_THROW(flash2.plan(p, with_config("m7")), Error);
}

TEST(CudaFlash2, RefusesWhatItDoesNotSupport) {
  Backend& flash2 = Registry::global().find("flash2");
  AttentionProblem p = make_problem(1, 2, 2, 128, 128, 96, DType::F16, Layout::BSHD, false);
  Support support = flash2.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_EQ(support.reason, "head dim 96 not supported by flash2; allowed: 64, 128, 256");

  p.head_dim = 64;
  p.dtype = DType::F32;
  support = flash2.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("dtype fp32 not supported by flash2"), std::string::npos) << support.reason;

  p.dtype = DType::BF16;
  p.head_dim = 128;
  p.head_dim_v = 64;
  support = flash2.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("head_dim_v 64 != head_dim 128"), std::string::npos) << support.reason;

  p.head_dim_v = 0;
  p.heads_kv = 3;  // not a divisor of heads_q
  EXPECT_FALSE(flash2.supports(p).ok);
}

#if ATTNSUITE_HAVE_FLASH3
// The same values in a layout whose every stride is larger than dense: the layout's dense
// strides of shape (b, s, h, d + pad). The padding holds NaN, so reading it shows in O.
HostTensor padded_copy(const HostTensor& t, Layout layout, std::int64_t pad) {
  HostTensor padded({t.shape[0], t.shape[1], t.shape[2], t.shape[3] + pad}, layout);
  padded.shape = t.shape;
  std::fill(padded.bits.begin(), padded.bits.end(), std::uint16_t{0x7FFF});  // NaN in fp16 and bf16
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t s = 0; s < t.shape[1]; ++s)
      for (std::int64_t h = 0; h < t.shape[2]; ++h)
        for (std::int64_t d = 0; d < t.shape[3]; ++d)
          padded.bits[padded.offset(b, s, h, d)] = t.bits[t.offset(b, s, h, d)];
  return padded;
}

// The flash3 tests that need the kernel itself skip (with the reason) where it cannot run.
#define SKIP_UNLESS_FLASH3_RUNS(problem)                                                 \
  do {                                                                                   \
    SKIP_WITHOUT_CUDA_DEVICE();                                                          \
    const Support flash3_support = Registry::global().find("flash3").supports(problem);  \
    if (!flash3_support.ok) GTEST_SKIP() << flash3_support.reason;                       \
  } while (0)

TEST(CudaFlash3, Deterministic) {
  // d128 with 2 stages and d64 with 3: many passes over the K/V ring, causal and GQA.
  for (const int head_dim : {128, 64}) {
    AttentionProblem p = make_problem(2, 4, 2, 1000, 1000, head_dim, DType::BF16, Layout::BSHD, true);
    SKIP_UNLESS_FLASH3_RUNS(p);
    const Inputs in = random_inputs(p, std::random_device{}());
    const DeviceRun first = run_on_device("flash3", p, in);
    const DeviceRun second = run_on_device("flash3", p, in);
    EXPECT_EQ(std::memcmp(first.out_bits.data(), second.out_bits.data(), first.out_bits.size() * 2), 0);
    EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4), 0);
  }
}

// The schedules (v2 "default": pipelined + ping-pong on persistent CTAs; "v1": serial; "grid":
// v2 with one CTA per work tile) against the reference, with tile counts 1 (only the prologue
// and the last P·V), 2 and many, causal rows with no key, GQA, every head dim, and more work
// tiles than the GPU has SMs (a persistent CTA runs several); the default equals "grid" bit for
// bit (the same arithmetic per work tile; dense problems run on persistent CTAs, masked ones one
// CTA per work tile).
TEST(CudaFlash3, EveryKernelConfigMatchesTheReference) {
  Backend& flash3 = Registry::global().find("flash3");
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  const std::vector<std::string> configs =
      flash3.kernel_configs(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  // The built-in choice first: n176 at d128 for a dense problem up to 8k keys.
  ASSERT_EQ(configs, (std::vector<std::string>{"n176", "default", "v1", "grid"}));
  for (const std::string config : {"default", "v1", "grid"}) {
    const PlanOptions options = with_config(config);
    SCOPED_TRACE("config " + config);
    for (const int head_dim : {64, 128, 256}) {
      SCOPED_TRACE("d" + std::to_string(head_dim));
      for (const AttentionProblem& p : {
               make_problem(1, 2, 2, 100, 100, head_dim, DType::BF16, Layout::BSHD, false),
               make_problem(1, 2, 1, 130, 250, head_dim, DType::F16, Layout::BHSD, false),
               make_problem(2, 4, 2, 1000, 333, head_dim, DType::BF16, Layout::BSHD, true),
               make_problem(1, 3, 1, 777, 2049, head_dim, DType::F16, Layout::BSHD, true),
               // 8 × 16 × 4 = 512 work tiles, a quarter of them with no key (rows 0..666 see none).
               make_problem(4, 16, 4, 1000, 333, head_dim, DType::BF16, Layout::BSHD, true),
               // 5 × 8 × 8 = 320 work tiles of 6 key tiles (11 at d256), dense.
               make_problem(8, 8, 8, 520, 700, head_dim, DType::F16, Layout::BHSD, false),
           })
        EXPECT_EQ(check_backend("flash3", p, options), config);
    }
  }
  for (const int head_dim : {64, 128, 256}) {
    SCOPED_TRACE("d" + std::to_string(head_dim));
    for (const bool causal : {false, true}) {
      const AttentionProblem p = make_problem(4, 16, 4, 1000, 1200, head_dim, DType::BF16, Layout::BSHD, causal);
      const Inputs in = random_inputs(p, std::random_device{}());
      const DeviceRun persistent = run_on_device("flash3", p, in, with_config("default"));
      const DeviceRun grid = run_on_device("flash3", p, in, with_config("grid"));
      EXPECT_EQ(std::memcmp(persistent.out_bits.data(), grid.out_bits.data(), grid.out_bits.size() * 2), 0);
      EXPECT_EQ(std::memcmp(persistent.lse.data(), grid.lse.data(), grid.lse.size() * 4), 0);
    }
  }
  const AttentionProblem p = make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false);
  EXPECT_THROW(flash3.plan(p, with_config("v7")), Error);
}

// Kernel config "m192" (d64 only: three consumer warpgroups, 192-row Q tiles) against the
// reference: sequence lengths 1, 7, 33 (one partial Q tile, mostly out of range: consumers 1
// and 2 own no row at seq 1..33), 193 (a second Q tile of one row), 1000; 1, 2 and many K tiles;
// causal with seq_q < seq_kv and seq_q > seq_kv (Q tiles and rows that see no key), GQA/MQA,
// BHSD, sliding windows; fp16 and bf16. And m192 equals the default up to rounding order.
// Small cases of m192 for compute-sanitizer (tools/device/run.sh): the partial 192-row Q tile, a
// K tile cut by the sequence end, causal GQA, both warpgroup barriers orders.
TEST(CudaFlash3, M192SmallCases) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false));
  for (const bool causal : {false, true})
    EXPECT_EQ(check_backend("flash3", make_problem(1, 4, 2, 385, 200, 64, DType::BF16, Layout::BSHD, causal),
                            with_config("m192")),
              "m192");
  // Not asked for, with no cache entry: the built-in choice (m192 at d64 but for causal N <= 1k;
  if (KernelConfigCache::global().size() == 0) {
    EXPECT_EQ(check_backend("flash3", make_problem(1, 2, 2, 1500, 1500, 64, DType::BF16, Layout::BSHD, true)), "m192");
    EXPECT_EQ(check_backend("flash3", make_problem(1, 2, 2, 1000, 1000, 64, DType::BF16, Layout::BSHD, true)),
              "default");
    // d128: n176 dense up to 8k keys and causal above 4k rows; the 128-key default otherwise.
    EXPECT_EQ(check_backend("flash3", make_problem(1, 2, 2, 300, 300, 128, DType::BF16, Layout::BSHD, false)), "n176");
    EXPECT_EQ(check_backend("flash3", make_problem(1, 2, 2, 300, 300, 128, DType::BF16, Layout::BSHD, true)),
              "default");
  }
}

// A tile config (m192 at d64, n176 at d128) against the reference on `cases`, equal to the
// default config up to rounding order, and asked for at another head dim a clear error.
struct TileConfigCase {
  int batch, heads_q, heads_kv, seq_q, seq_kv;
  Layout layout;
  bool causal;
  int window_left, window_right;
};

void expect_tile_config_matches_reference(const std::string& config, int head_dim,
                                          const std::vector<TileConfigCase>& cases) {
  const Backend& flash3 = Registry::global().find("flash3");
  // Dense, 64 keys: the tile config is the built-in choice at its head dim (listed first).
  const std::vector<std::string> configs =
      flash3.kernel_configs(make_problem(1, 2, 2, 64, 64, head_dim, DType::BF16, Layout::BSHD, false));
  ASSERT_EQ(configs, (std::vector<std::string>{config, "default", "v1", "grid"}));
  for (const DType dtype : {DType::BF16, DType::F16}) {
    for (const TileConfigCase& c : cases) {
      AttentionProblem p =
          make_problem(c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_kv, head_dim, dtype, c.layout, c.causal);
      p.window_left = c.window_left;
      p.window_right = c.window_right;
      EXPECT_EQ(check_backend("flash3", p, with_config(config)), config);
    }
  }

  // m192: the same key tiles and arithmetic as the default (128 × 128 tiles) in another grouping
  // of rows: equal up to rounding order. (n176's key tiles differ, so its running maxima and P's
  // rounding to 16 bits do: only the reference bound above holds, as for any two kernels; on the
  // H200 1041 of 1,024,000 O entries were more than 2^-6 apart.)
  if (config == "m192") {
    const AttentionProblem p = make_problem(2, 4, 2, 1000, 1000, head_dim, DType::BF16, Layout::BSHD, true);
    const Inputs in = random_inputs(p, std::random_device{}());
    const DeviceRun tiled = run_on_device("flash3", p, in, with_config(config));
    const DeviceRun standard = run_on_device("flash3", p, in, with_config("default"));
    // NaN on either side counts as apart.
    int lse_apart = 0, o_apart = 0;
    for (std::size_t i = 0; i < tiled.lse.size(); ++i) {
      const float a = tiled.lse[i], b = standard.lse[i];
      if (a != b && !(std::abs(a - b) <= 1e-4f * std::max(std::abs(a), 1.0f))) ++lse_apart;
    }
    for (std::size_t i = 0; i < tiled.out_bits.size(); ++i) {  // bf16: 2^-6 relative = 2 to 4 ulps
      const float a = load_as_float(tiled.out_bits.data(), p.dtype, static_cast<std::int64_t>(i));
      const float b = load_as_float(standard.out_bits.data(), p.dtype, static_cast<std::int64_t>(i));
      if (!(std::abs(a - b) <= std::ldexp(1.0f, -6) * std::max(std::abs(a), 1.0f / 64))) ++o_apart;
    }
    EXPECT_EQ(lse_apart, 0) << "LSE entries of " << config << " and default apart";
    EXPECT_EQ(o_apart, 0) << "O entries of " << config << " and default apart";
  }

  // Asked for on another head dim: a clear error from plan(), before any launch, naming the
  // configs that problem has.
  for (const int other : {64, 128, 256}) {
    if (other == head_dim) continue;
    const AttentionProblem p = make_problem(1, 2, 2, 64, 64, other, DType::BF16, Layout::BSHD, false);
    try {
      run_on_device("flash3", p, random_inputs(p, 1), with_config(config));
      ADD_FAILURE() << "flash3 ran kernel config " << config << " at head dim " << other;
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Usage);
      std::string allowed;
      for (const std::string& c : flash3.kernel_configs(p)) allowed += (allowed.empty() ? "" : ", ") + c;
      EXPECT_EQ(std::string(error.what()),
                "flash3: kernel config '" + config + "' unknown for this problem; allowed: " + allowed);
    }
  }
}

TEST(CudaFlash3, M192MatchesTheReference) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false));
  expect_tile_config_matches_reference(
      "m192", 64,
      {
          {1, 2, 2, 1, 1, Layout::BSHD, false, -1, -1},         // one row, one key
          {2, 2, 2, 7, 7, Layout::BSHD, true, -1, -1},          // seq 7 causal
          {1, 3, 3, 33, 33, Layout::BHSD, false, -1, -1},       // seq 33, BHSD
          {1, 2, 2, 100, 128, Layout::BSHD, false, -1, -1},     // exactly one full K tile
          {1, 2, 1, 193, 250, Layout::BHSD, false, -1, -1},     // 2 K tiles, Q tiles of 192 + 1 rows, GQA
          {1, 2, 2, 193, 193, Layout::BSHD, true, -1, -1},      // causal, 2 K tiles, 192 + 1 rows
          {1, 4, 2, 385, 385, Layout::BSHD, true, -1, -1},      // 3 Q tiles (192, 192, 1), causal GQA
          {2, 4, 2, 1000, 1000, Layout::BSHD, true, -1, -1},    // many K tiles, causal GQA
          {1, 2, 2, 1000, 1000, Layout::BHSD, false, -1, -1},   // many K tiles, dense, BHSD
          {2, 4, 2, 1000, 333, Layout::BSHD, true, -1, -1},     // seq_q > seq_kv: rows and tiles with no key
          {1, 3, 1, 300, 2049, Layout::BSHD, true, -1, -1},     // seq_q < seq_kv causal, MQA, 17 K tiles
          {1, 4, 2, 700, 700, Layout::BHSD, true, 129, -1},     // causal + left window (local), GQA
          {1, 2, 2, 1000, 1000, Layout::BSHD, false, 100, 37},  // two-sided window: tiles skipped on both sides
      });
}

// Kernel config "n176" (d128 only: 176-key K/V tiles): K tiles that are exactly full (176),
// one key over (177: a second tile of one key), cut by the end of the keys, on the causal
// diagonal at every offset (176 and 128 share no period below 1408 keys), seq_q != seq_kv both
// ways, GQA/MQA, BHSD, windows; fp16 and bf16.
TEST(CudaFlash3, N176MatchesTheReference) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  expect_tile_config_matches_reference(
      "n176", 128,
      {
          {1, 2, 2, 1, 1, Layout::BSHD, false, -1, -1},         // one row, one key
          {2, 2, 2, 7, 7, Layout::BSHD, true, -1, -1},          // seq 7 causal
          {1, 3, 3, 33, 33, Layout::BHSD, false, -1, -1},       // seq 33, BHSD
          {1, 2, 2, 100, 176, Layout::BSHD, false, -1, -1},     // exactly one full K tile
          {1, 2, 1, 129, 177, Layout::BHSD, false, -1, -1},     // a second K tile of one key, GQA
          {1, 2, 2, 353, 353, Layout::BSHD, true, -1, -1},      // causal, 3 K tiles, Q tiles 128 + 128 + 97
          {2, 4, 2, 1000, 1000, Layout::BSHD, true, -1, -1},    // many K tiles, causal GQA
          {1, 2, 2, 1408, 1408, Layout::BHSD, false, -1, -1},   // 8 full K tiles, dense, BHSD
          {2, 4, 2, 1000, 333, Layout::BSHD, true, -1, -1},     // seq_q > seq_kv: rows and tiles with no key
          {1, 3, 1, 300, 2049, Layout::BSHD, true, -1, -1},     // seq_q < seq_kv causal, MQA, 12 K tiles
          {1, 4, 2, 700, 700, Layout::BHSD, true, 129, -1},     // causal + left window (local), GQA
          {1, 2, 2, 1000, 1000, Layout::BSHD, false, 100, 37},  // two-sided window: tiles skipped on both sides
      });
}

// Small cases of the persistent CTAs for compute-sanitizer (tools/device/run.sh): more work tiles
// than an H200 has SMs (132), so that a CTA runs several back to back (Q reloaded behind the
// "Q empty" barrier, the K/V ring and the ping-pong carried over); and a causal problem with
// many work tiles without a key (one CTA per work: masked problems are not persistent).
TEST(CudaFlash3, PersistentSmallCases) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false));
  // 140 work tiles of one key tile each, dense (d64: m192's 192-row tiles); 3 × 140 = 420 work
  // tiles, causal with seq_q > seq_kv (rows 0..199 see no key), d128; 140 dense work tiles at
  // d128 (n176).
  check_backend("flash3", make_problem(1, 140, 140, 64, 64, 64, DType::BF16, Layout::BSHD, false));
  check_backend("flash3", make_problem(2, 70, 10, 300, 100, 128, DType::BF16, Layout::BSHD, true));
  check_backend("flash3", make_problem(1, 140, 140, 100, 200, 128, DType::F16, Layout::BHSD, false));
}

// Small cases of n176 for compute-sanitizer (tools/device/run.sh): a K tile cut by the
// sequence end, causal GQA, a second Q tile.
TEST(CudaFlash3, N176SmallCases) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  for (const bool causal : {false, true})
    EXPECT_EQ(check_backend("flash3", make_problem(1, 4, 2, 200, 385, 128, DType::BF16, Layout::BSHD, causal),
                            with_config("n176")),
              "n176");
}

// m192 is listed for head dim 64 only, n176 for head dim 128 only, and only by flash3 (flash3-fp8
// has no such kernels); the built-in choice first (flash3.hpp). choose_kernel_config, which
// plan() asks, takes a listed config and refuses any other naming the listed ones.
// Host only (no plan is made, no kernel-config cache read): runs everywhere, CI included.
TEST(CudaFlash3, M192IsAConfigOfHeadDim64Only) {
  const Backend& flash3 = Registry::global().find("flash3");
  for (const int head_dim : {64, 128, 256}) {
    const std::vector<std::string> configs =
        flash3.kernel_configs(make_problem(1, 2, 2, 300, 300, head_dim, DType::F16, Layout::BSHD, true));
    EXPECT_EQ(configs, head_dim == 64    ? (std::vector<std::string>{"default", "v1", "grid", "m192"})
                       : head_dim == 128 ? (std::vector<std::string>{"default", "v1", "grid", "n176"})
                                         : (std::vector<std::string>{"default", "v1", "grid"}))
        << "d" << head_dim;
  }
  // The built-in choice where it is a tile config: d64 except causal N <= 1k, d128 dense up to
  // 8k keys or causal above 4k rows.
  EXPECT_EQ(flash3.kernel_configs(make_problem(1, 2, 2, 1500, 1500, 64, DType::F16, Layout::BSHD, true)),
            (std::vector<std::string>{"m192", "default", "v1", "grid"}));
  EXPECT_EQ(flash3.kernel_configs(make_problem(1, 2, 2, 300, 9000, 128, DType::F16, Layout::BSHD, false)),
            (std::vector<std::string>{"default", "v1", "grid", "n176"}));
  EXPECT_EQ(flash3.kernel_configs(make_problem(1, 2, 2, 4097, 4097, 128, DType::F16, Layout::BSHD, true)),
            (std::vector<std::string>{"n176", "default", "v1", "grid"}));

  const AttentionProblem d64 = make_problem(1, 2, 2, 300, 300, 64, DType::F16, Layout::BSHD, true);
  const AttentionProblem d128 = make_problem(1, 2, 2, 300, 300, 128, DType::F16, Layout::BSHD, true);
  KernelConfigCache empty;
  PlanOptions options = with_config("m192");
  options.kernel_cache = &empty;
  EXPECT_EQ(choose_kernel_config(flash3, d64, options), "m192");
  const auto refusal = [&](const Backend& backend, const AttentionProblem& p, const std::string& config) {
    PlanOptions asked = with_config(config);
    asked.kernel_cache = &empty;
    try {
      (void)choose_kernel_config(backend, p, asked);
      ADD_FAILURE() << backend.name() << ": config " << config << " was accepted for " << p.describe();
      return std::string();
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Usage);
      return std::string(error.what());
    }
  };
  EXPECT_EQ(refusal(flash3, d128, "m192"),
            "flash3: kernel config 'm192' unknown for this problem; allowed: default, v1, grid, n176");
  EXPECT_EQ(refusal(flash3, d64, "m256"),
            "flash3: kernel config 'm256' unknown for this problem; allowed: default, v1, grid, m192");
  // Not asked for, no cache entry: the built-in choice.
  options.kernel_config.clear();
  EXPECT_EQ(choose_kernel_config(flash3, d64, options), "default");

  const Backend& fp8 = Registry::global().find("flash3-fp8");
  const AttentionProblem fp8_problem = make_problem(1, 2, 2, 300, 300, 64, DType::BF16, Layout::BSHD, false);
  EXPECT_EQ(fp8.kernel_configs(fp8_problem), (std::vector<std::string>{"default", "v1"}));
  for (const char* config : {"m192", "n176", "grid"}) EXPECT_FALSE(refusal(fp8, fp8_problem, config).empty());
}

// TMA descriptors are built from the views' strides: padded Q, K, V (every stride a larger
// multiple of 8 elements than dense) must give bit for bit the output of dense ones.
TEST(CudaFlash3, PaddedStridesReadLikeDenseOnes) {
  for (const Layout layout : {Layout::BSHD, Layout::BHSD}) {
    const AttentionProblem p = make_problem(2, 4, 2, 300, 333, 128, DType::BF16, layout, true);
    SKIP_UNLESS_FLASH3_RUNS(p);
    SCOPED_TRACE(p.describe());
    const Inputs dense = random_inputs(p, std::random_device{}());
    const Inputs padded{padded_copy(dense.q, layout, 8), padded_copy(dense.k, layout, 16),
                        padded_copy(dense.v, layout, 24)};
    const DeviceRun want = run_on_device("flash3", p, dense);
    const DeviceRun got = run_on_device("flash3", p, padded);
    EXPECT_EQ(std::memcmp(want.out_bits.data(), got.out_bits.data(), want.out_bits.size() * 2), 0);
    EXPECT_EQ(std::memcmp(want.lse.data(), got.lse.data(), want.lse.size() * 4), 0);
  }
}

TEST(CudaFlash3, RefusesStridesThatTmaCannotRead) {
  const AttentionProblem p = make_problem(1, 2, 2, 64, 64, 64, DType::F16, Layout::BSHD, false);
  SKIP_UNLESS_FLASH3_RUNS(p);
  const Inputs dense = random_inputs(p, 1);
  const Inputs padded{padded_copy(dense.q, p.layout, 4), dense.k, dense.v};  // heads 136 bytes apart
  try {
    run_on_device("flash3", p, padded);
    ADD_FAILURE() << "flash3 ran with a Q head stride of 68 elements (136 bytes)";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
    EXPECT_EQ(std::string(error.what()).rfind("flash3: q cannot be read by TMA: head stride 68 elements", 0), 0u)
        << error.what();
  }
}

TEST(CudaFlash3, RefusesWhatItDoesNotSupport) {
  Backend& flash3 = Registry::global().find("flash3");
  AttentionProblem p = make_problem(1, 2, 2, 128, 128, 96, DType::F16, Layout::BSHD, false);
  Support support = flash3.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_EQ(support.reason, "head dim 96 not supported by flash3; allowed: 64, 128, 256");

  p.head_dim = 64;
  p.dtype = DType::F32;
  support = flash3.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("dtype fp32 not supported by flash3"), std::string::npos) << support.reason;

  p.dtype = DType::BF16;
  p.head_dim = 128;
  p.head_dim_v = 64;
  support = flash3.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("head_dim_v 64 != head_dim 128"), std::string::npos) << support.reason;

  // A valid problem: runs on sm_90 only, and says so on any other GPU.
  p.head_dim_v = 0;
  if (!cuda_device_missing().empty()) return;  // the no-device answer is checked below
  const cuda::CudaDeviceInfo info = cuda::query_cuda_device(0);
  support = flash3.supports(p);
  if (info.compute_capability() == 90) {
    EXPECT_TRUE(support.ok) << support.reason;
  } else {
    EXPECT_FALSE(support.ok);
    EXPECT_EQ(support.reason, "flash3 needs sm_90 (Hopper); this GPU is sm_" +
                                  std::to_string(info.compute_capability()));
  }
}

// ---- flash3-fp8 -------------------------------------------------------------------------------
// flash3-fp8 takes bf16 Q, K, V, quantizes each tensor to e4m3 on the device (descale =
// amax / 448) and runs the e4m3 kernel. The host models the quantization bit for bit
// (float_to_e4m3_bits, the same fp32 operations), so the reference below is the fp64 attention
// of the dequantized inputs: what is left between it and the kernel is P rounded to e4m3, fp8
// wgmma accumulation and ex2.approx. Bound: twice the error of that fp64 computation with only P
// rounded to e4m3 (unnormalized, as the kernel does) and O rounded to bf16, plus 2 bf16 ulps of
// the largest |O| — the existing tests' rule, with the fp8 step as the "naive" model.

// Q, K or V as the backend's pre-pass leaves it, dequantized (e4m3 value · descale), at the
// HostTensor's offsets.
std::vector<double> dequantized_e4m3(const HostTensor& t) {
  float amax = 0.0f;  // over the finite values
  for (const std::uint16_t bits : t.bits) {
    const float magnitude = std::abs(bf16_bits_to_float(bits));
    if (std::isfinite(magnitude)) amax = std::max(amax, magnitude);
  }
  const bool scaled = amax > 0.0f;
  const float descale = scaled ? amax / 448.0f : 1.0f;
  const float inverse = scaled ? 448.0f / amax : 1.0f;
  std::vector<double> values(t.bits.size());
  for (std::size_t i = 0; i < t.bits.size(); ++i) {
    const float x = bf16_bits_to_float(t.bits[i]);
    values[i] = std::isinf(x) ? std::numeric_limits<double>::quiet_NaN()
                              : double(e4m3_bits_to_float(float_to_e4m3_bits(x * inverse))) * descale;
  }
  return values;
}

// fp64 attention over per-tensor value arrays (at the HostTensors' offsets); with fp8_p, P is
// rounded to e4m3 before P·V (the row sum is not) and O to bf16.
Result reference_of_values(const AttentionProblem& p, const Inputs& layout, const std::vector<double>& q,
                           const std::vector<double>& k, const std::vector<double>& v, bool fp8_p) {
  Result r = empty_result(p);
  const double scale = p.softmax_scale();
  parallel_rows(static_cast<std::int64_t>(p.batch) * p.heads_q * p.seq_q, [&](std::int64_t row) {
    const std::int64_t i = row % p.seq_q, h = row / p.seq_q % p.heads_q, b = row / p.seq_q / p.heads_q;
    const std::int64_t kvh = p.kv_head_of(static_cast<int>(h));
    const std::int64_t begin = p.key_begin(i), end = p.key_end(i);
    double* out = &r.out[out_index(p, b, h, i)];
    std::fill(out, out + p.dim_v(), 0.0);
    if (begin >= end) {
      r.lse[row] = -std::numeric_limits<double>::infinity();
      return;
    }
    std::vector<double> s(end - begin);
    double max = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = begin; j < end; ++j) {
      double dot = 0.0;
      for (int d = 0; d < p.head_dim; ++d) dot += q[layout.q.offset(b, i, h, d)] * k[layout.k.offset(b, j, kvh, d)];
      s[j - begin] = dot * scale;
      max = std::max(max, s[j - begin]);
    }
    double sum = 0.0;
    for (auto& value : s) sum += (value = std::exp(value - max));
    for (std::int64_t j = begin; j < end; ++j) {
      const double weight = fp8_p ? e4m3_bits_to_float(float_to_e4m3_bits(static_cast<float>(s[j - begin])))
                                  : s[j - begin];
      for (int d = 0; d < p.dim_v(); ++d) out[d] += weight * v[layout.v.offset(b, j, kvh, d)];
    }
    for (int d = 0; d < p.dim_v(); ++d) {
      out[d] /= sum;
      if (fp8_p) out[d] = round_to(DType::BF16, static_cast<float>(out[d]));
    }
    r.lse[row] = max + std::log(sum);
  });
  return r;
}

// The device output in (b, h, i, d) order.
std::vector<double> output_values(const AttentionProblem& p, const DeviceRun& run) {
  const HostTensor o_layout({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  std::vector<double> got(static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * p.dim_v());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        for (std::int64_t d = 0; d < p.dim_v(); ++d)
          got[out_index(p, b, h, i) + d] = load_as_float(run.out_bits.data(), p.dtype, o_layout.offset(b, i, h, d));
  return got;
}

#define SKIP_UNLESS_FLASH3_FP8_RUNS(problem)                                                    \
  do {                                                                                          \
    SKIP_WITHOUT_CUDA_DEVICE();                                                                 \
    const Support fp8_support = Registry::global().find("flash3-fp8").supports(problem);        \
    if (!fp8_support.ok) GTEST_SKIP() << fp8_support.reason;                                    \
  } while (0)

// One problem: O within the fp8 bound of the dequantized-input reference, LSE within 0.01
// (QKᵀ in e4m3 wgmma; a wrong tile or descale is off by O(1)), -inf exactly on rows with no key.
// Returns the kernel config that ran.
std::string check_flash3_fp8(const AttentionProblem& p, const PlanOptions& options) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("flash3-fp8 " + p.describe() + " seed " + std::to_string(seed));
  const Inputs in = random_inputs(p, seed);
  const DeviceRun run = run_on_device("flash3-fp8", p, in, options);
  const std::vector<double> q = dequantized_e4m3(in.q), k = dequantized_e4m3(in.k), v = dequantized_e4m3(in.v);
  const Result ref = reference_of_values(p, in, q, k, v, false);
  const Result naive = reference_of_values(p, in, q, k, v, true);
  const std::vector<double> got = output_values(p, run);

  const ErrorStats err = compare(got, ref.out);
  const ErrorStats naive_err = compare(naive.out, ref.out);
  const double floor = 2.0 * std::ldexp(1.0, -7) * std::exp2(std::floor(std::log2(std::max(max_abs(ref.out), 1.0 / 16))));
  const double bound = 2.0 * naive_err.max_abs + floor;
  EXPECT_EQ(err.nan_count, 0) << "NaN (poison never overwritten, or computed) in O";
  EXPECT_LE(err.max_abs, bound) << "O max abs err " << err.max_abs << " (mean " << err.mean_abs << ") at flat index "
                                << err.worst_index << "; e4m3-P model " << naive_err.max_abs << ", floor " << floor;

  double lse_err = 0.0;
  std::int64_t inf_mismatch = 0, lse_nan = 0;
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    const double got_lse = run.lse[i];
    if (std::isnan(got_lse)) {
      ++lse_nan;
      continue;
    }
    const bool ref_empty = std::isinf(ref.lse[i]), got_empty = std::isinf(got_lse) && got_lse < 0;
    if (ref_empty != got_empty) {
      ++inf_mismatch;
      continue;
    }
    if (!ref_empty) lse_err = std::max(lse_err, std::abs(got_lse - ref.lse[i]));
  }
  EXPECT_EQ(lse_nan, 0) << "NaN in LSE";
  EXPECT_EQ(inf_mismatch, 0) << "rows whose LSE is -inf in one of reference and backend only";
  EXPECT_LE(lse_err, 0.01) << "LSE max abs err";
  std::printf("  flash3-fp8    %-58s O max err %.3g (e4m3-P model %.3g, bound %.3g)  LSE max err %.3g\n",
              p.describe().c_str(), err.max_abs, naive_err.max_abs, bound, lse_err);
  return run.kernel_config;
}

TEST(CudaFlash3Fp8, MatchesTheQuantizedReference) {
  struct Case {
    int batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    Layout layout;
    bool causal;
    int window_left, window_right;
  };
  const Case cases[] = {
      {1, 1, 1, 1, 1, 128, Layout::BSHD, false, -1, -1},       // one key
      {1, 2, 2, 7, 33, 64, Layout::BSHD, false, -1, -1},       // partial tiles only
      {2, 4, 4, 257, 257, 128, Layout::BSHD, false, -1, -1},   // 3 K/V tiles, last one 1 key
      {2, 4, 4, 257, 257, 64, Layout::BSHD, true, -1, -1},     // causal d64
      {1, 8, 2, 333, 1000, 128, Layout::BHSD, true, -1, -1},   // GQA, seq_q < seq_kv, BHSD
      {1, 4, 1, 1000, 300, 64, Layout::BSHD, true, -1, -1},    // MQA, seq_q > seq_kv: rows with no key
      {1, 2, 2, 700, 700, 128, Layout::BSHD, false, 100, 0},   // sliding window
      {1, 2, 2, 1500, 1500, 128, Layout::BSHD, false, -1, -1}, // 12 K/V tiles: the stage ring wraps 4 times
  };
  // Both schedules (v2 "default", "v1"), each case against the e4m3 reference.
  const Backend& fp8 = Registry::global().find("flash3-fp8");
  const AttentionProblem listed = make_problem(1, 1, 1, 64, 64, 128, DType::BF16, Layout::BSHD, false);
  ASSERT_EQ(fp8.kernel_configs(listed), (std::vector<std::string>{"default", "v1"}));
  for (const std::string config : {"default", "v1"}) {
    SCOPED_TRACE("config " + config);
    for (const Case& c : cases) {
      AttentionProblem p =
          make_problem(c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_kv, c.head_dim, DType::BF16, c.layout, c.causal);
      p.window_left = c.window_left;
      p.window_right = c.window_right;
      SKIP_UNLESS_FLASH3_FP8_RUNS(p);
      EXPECT_EQ(check_flash3_fp8(p, with_config(config)), config);
    }
  }
  EXPECT_THROW(fp8.plan(listed, with_config("v3")), Error);
}

double cosine_similarity(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0.0, a_norm = 0.0, b_norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    a_norm += a[i] * a[i];
    b_norm += b[i] * b[i];
  }
  return dot / std::sqrt(a_norm * b_norm);
}

// The accuracy bar, cosine similarity >= 0.999, on N(0, 1) Q, K, V, 2×4×1024, d128 and
// d64, causal and not, against two fp64 references:
//  - of the quantized inputs (what `reference` reads once inputs are e4m3 tensors): only the
//    kernel's own error is left (P in e4m3, fp8 accumulation) — >= 0.999 (a numpy model of the
//    same steps gives 0.9997);
//  - of the bf16 inputs (the bench's accuracy pass today): e4m3's 3-bit mantissa on Q, K and V
//    is counted too, which no per-tensor or per-block scale removes on Gaussian data (the
//    model: 0.9986 non-causal, 0.9989 causal; Q·Kᵀ 0.9993, V 0.9997, P 0.9997 alone) — so
//    the bound there is 0.998, and the value is printed.
TEST(CudaFlash3Fp8, CosineSimilarity) {
  for (const int head_dim : {128, 64})
    for (const bool causal : {false, true}) {
      const AttentionProblem p = make_problem(2, 4, 4, 1024, 1024, head_dim, DType::BF16, Layout::BSHD, causal);
      SKIP_UNLESS_FLASH3_FP8_RUNS(p);
      SCOPED_TRACE(p.describe());
      const Inputs in = random_inputs(p, std::random_device{}());
      const DeviceRun run = run_on_device("flash3-fp8", p, in);
      const std::vector<double> got = output_values(p, run);
      const Result quantized_ref =
          reference_of_values(p, in, dequantized_e4m3(in.q), dequantized_e4m3(in.k), dequantized_e4m3(in.v), false);
      const Result bf16_ref = reference_f64(p, in);
      const double cosine_quantized = cosine_similarity(got, quantized_ref.out);
      const double cosine_bf16 = cosine_similarity(got, bf16_ref.out);
      EXPECT_GE(cosine_quantized, 0.999);
      EXPECT_GE(cosine_bf16, 0.998);
      std::printf("  flash3-fp8    %-58s cosine vs fp64 of the e4m3 inputs %.6f, of the bf16 inputs %.6f\n",
                  p.describe().c_str(), cosine_quantized, cosine_bf16);
    }
}

TEST(CudaFlash3Fp8, Deterministic) {
  for (const int head_dim : {128, 64}) {
    const AttentionProblem p = make_problem(2, 4, 2, 1000, 1000, head_dim, DType::BF16, Layout::BSHD, true);
    SKIP_UNLESS_FLASH3_FP8_RUNS(p);
    const Inputs in = random_inputs(p, std::random_device{}());
    const DeviceRun first = run_on_device("flash3-fp8", p, in);
    const DeviceRun second = run_on_device("flash3-fp8", p, in);
    EXPECT_EQ(std::memcmp(first.out_bits.data(), second.out_bits.data(), first.out_bits.size() * 2), 0);
    EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4), 0);
  }
}

// The pre-pass reads the views' strides: padded Q, K, V give bit for bit the dense result.
TEST(CudaFlash3Fp8, PaddedStridesReadLikeDenseOnes) {
  const AttentionProblem p = make_problem(2, 4, 2, 300, 333, 128, DType::BF16, Layout::BHSD, true);
  SKIP_UNLESS_FLASH3_FP8_RUNS(p);
  const Inputs dense = random_inputs(p, std::random_device{}());
  const Inputs padded{padded_copy(dense.q, p.layout, 8), padded_copy(dense.k, p.layout, 16),
                      padded_copy(dense.v, p.layout, 24)};
  const DeviceRun want = run_on_device("flash3-fp8", p, dense);
  const DeviceRun got = run_on_device("flash3-fp8", p, padded);
  EXPECT_EQ(std::memcmp(want.out_bits.data(), got.out_bits.data(), want.out_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(want.lse.data(), got.lse.data(), want.lse.size() * 4), 0);
}

TEST(CudaFlash3Fp8, RefusesWhatItDoesNotSupport) {
  const Backend& fp8 = Registry::global().find("flash3-fp8");
  AttentionProblem p = make_problem(1, 2, 2, 128, 128, 128, DType::F16, Layout::BSHD, false);
  Support support = fp8.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_EQ(support.reason, "dtype fp16 not supported by flash3-fp8; allowed: bf16 (quantized to e4m3 by the backend), "
                            "e4m3 (experimental)");

  p.dtype = DType::F32;
  support = fp8.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("fp32"), std::string::npos) << support.reason;

  p.dtype = DType::BF16;
  for (const int head_dim : {96, 256}) {
    p.head_dim = head_dim;
    support = fp8.supports(p);
    EXPECT_FALSE(support.ok);
    EXPECT_EQ(support.reason,
              "head dim " + std::to_string(head_dim) + " not supported by flash3-fp8; allowed: 64, 128");
  }

  p.head_dim = 128;
  p.head_dim_v = 64;
  support = fp8.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("head_dim_v 64 != head_dim 128"), std::string::npos) << support.reason;

  p.head_dim_v = 0;
  if (!cuda_device_missing().empty()) return;
  const cuda::CudaDeviceInfo info = cuda::query_cuda_device(0);
  support = fp8.supports(p);
  if (info.compute_capability() == 90) {
    EXPECT_TRUE(support.ok) << support.reason;
    // Without the workspace its plan asked for, forward refuses before any launch.
    const std::unique_ptr<KernelPlan> plan = fp8.plan(p, {});
    EXPECT_GT(plan->workspace_bytes(), 0u);
    auto context = cuda::make_cuda_context(0);
    AttentionArgs args;
    const Device device = context->device();
    const HostTensor t({1, 128, 2, 128}, Layout::BSHD);
    auto buffer = context->allocate(t.bytes() * 4);
    auto* base = static_cast<std::uint8_t*>(buffer->data());
    auto view = [&](int i) { return TensorView{base + i * t.bytes(), DType::BF16, device, t.shape, t.strides}; };
    args.q = view(0);
    args.k = view(1);
    args.v = view(2);
    args.o = view(3);
    try {
      plan->forward(args, context->stream());
      ADD_FAILURE() << "flash3-fp8 ran without a workspace";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Usage);
      EXPECT_NE(std::string(error.what()).find("needs a workspace of"), std::string::npos) << error.what();
    }
  } else {
    EXPECT_FALSE(support.ok);
    EXPECT_EQ(support.reason, "flash3-fp8 needs sm_90 (Hopper); this GPU is sm_" +
                                  std::to_string(info.compute_capability()));
  }
}

// ---- flash3-fp8 on e4m3 inputs (experimental: written before it first ran on a GPU) ------------
// e4m3 Q, K, V go to the same kernel as the bf16-in path's pre-pass output. quantize_e4m3 is the
// host model of that pre-pass (descale = amax / 448 in fp32, x · (448 / amax) rounded by
// float_to_e4m3_bits, the model of cvt.rn.satfinite): the e4m3 path on the host-quantized bf16
// values must give O and LSE bit for bit equal to the bf16-in path on those bf16 values.

struct E4m3Tensor {
  std::vector<std::uint8_t> bytes;  // at the HostTensor's offsets (elements = bytes), padding 0
  float descale = 1.0f;
};

// The bf16 values of `t` (at its logical positions) quantized per tensor, at t's offsets.
E4m3Tensor quantized(const HostTensor& t) {
  std::vector<float> values;
  values.reserve(static_cast<std::size_t>(t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3]));
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t s = 0; s < t.shape[1]; ++s)
      for (std::int64_t h = 0; h < t.shape[2]; ++h)
        for (std::int64_t d = 0; d < t.shape[3]; ++d) values.push_back(t.at(DType::BF16, b, s, h, d));
  std::vector<std::uint8_t> dense(values.size());
  E4m3Tensor out;
  out.descale = quantize_e4m3(values.data(), dense.data(), values.size());
  out.bytes.assign(t.bits.size(), 0);
  std::size_t i = 0;
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t s = 0; s < t.shape[1]; ++s)
      for (std::int64_t h = 0; h < t.shape[2]; ++h)
        for (std::int64_t d = 0; d < t.shape[3]; ++d) out.bytes[static_cast<std::size_t>(t.offset(b, s, h, d))] = dense[i++];
  return out;
}

// flash3-fp8 on e4m3 Q, K, V (`layout`'s shapes and strides, e4m3_p.dtype == E4M3), bf16 O.
DeviceRun run_e4m3_on_device(const AttentionProblem& e4m3_p, const Inputs& layout, const E4m3Tensor& q,
                             const E4m3Tensor& k, const E4m3Tensor& v) {
  const AttentionProblem& p = e4m3_p;
  auto context = cuda::make_cuda_context(0);
  const Backend& backend = Registry::global().find("flash3-fp8");
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, {});
  const HostTensor o_layout({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  auto dq = context->allocate(q.bytes.size()), dk = context->allocate(k.bytes.size()),
       dv = context->allocate(v.bytes.size()), o = context->allocate(o_layout.bytes());
  const std::size_t lse_bytes = sizeof(float) * p.batch * p.heads_q * p.seq_q;
  auto lse = context->allocate(lse_bytes);
  context->copy_to_device(dq->data(), q.bytes.data(), q.bytes.size());
  context->copy_to_device(dk->data(), k.bytes.data(), k.bytes.size());
  context->copy_to_device(dv->data(), v.bytes.data(), v.bytes.size());
  context->poison(o->data(), o_layout.bytes());
  context->poison(lse->data(), lse_bytes);
  const Device device = context->device();
  auto view = [&](void* data, const HostTensor& t, const E4m3Tensor& e) {
    TensorView out{data, DType::E4M3, device, t.shape, t.strides};
    out.descale = e.descale;
    return out;
  };
  AttentionArgs args;
  args.q = view(dq->data(), layout.q, q);
  args.k = view(dk->data(), layout.k, k);
  args.v = view(dv->data(), layout.v, v);
  args.o = TensorView{o->data(), DType::BF16, device, o_layout.shape, o_layout.strides};
  args.lse = LseView{static_cast<float*>(lse->data()), device};
  auto workspace = context->allocate(plan->workspace_bytes());
  args.workspace = workspace->data();
  const RunReport report = plan->forward(args, context->stream());
  context->synchronize();
  DeviceRun run{std::vector<std::uint16_t>(o_layout.bits.size()), std::vector<float>(p.batch * p.heads_q * p.seq_q),
                report.kernel_config};
  context->copy_to_host(run.out_bits.data(), o->data(), o_layout.bytes());
  context->copy_to_host(run.lse.data(), lse->data(), lse_bytes);
  return run;
}

TEST(CudaFlash3Fp8E4m3, SameBitsAsTheBf16InPathOnTheSameE4m3Values) {
  struct Case {
    int batch, heads_q, heads_kv, seq_q, seq_kv, head_dim;
    Layout layout;
    bool causal;
  };
  const Case cases[] = {
      {1, 1, 1, 1, 1, 128, Layout::BSHD, false},     {1, 2, 2, 7, 33, 64, Layout::BSHD, false},
      {2, 4, 4, 257, 257, 128, Layout::BSHD, false}, {2, 4, 4, 257, 257, 64, Layout::BSHD, true},
      {1, 8, 2, 333, 1000, 128, Layout::BHSD, true}, {1, 4, 1, 1000, 300, 64, Layout::BSHD, true},
  };
  for (const Case& c : cases) {
    const AttentionProblem bf16 =
        make_problem(c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_kv, c.head_dim, DType::BF16, c.layout, c.causal);
    AttentionProblem e4m3 = bf16;
    e4m3.dtype = DType::E4M3;
    SKIP_UNLESS_FLASH3_FP8_RUNS(e4m3);
    SCOPED_TRACE(e4m3.describe());
    const Inputs in = random_inputs(bf16, std::random_device{}());
    const DeviceRun want = run_on_device("flash3-fp8", bf16, in);
    const DeviceRun got = run_e4m3_on_device(e4m3, in, quantized(in.q), quantized(in.k), quantized(in.v));
    EXPECT_EQ(std::memcmp(want.out_bits.data(), got.out_bits.data(), want.out_bits.size() * 2), 0);
    EXPECT_EQ(std::memcmp(want.lse.data(), got.lse.data(), want.lse.size() * 4), 0);
  }
}

// The bar on e4m3 inputs: cosine >= 0.999 against the fp64 reference of the e4m3 inputs
// (dequantized), d128 and d64, causal and not.
TEST(CudaFlash3Fp8E4m3, CosineAgainstTheReferenceOfTheE4m3Inputs) {
  for (const int head_dim : {128, 64})
    for (const bool causal : {false, true}) {
      AttentionProblem p = make_problem(2, 4, 4, 1024, 1024, head_dim, DType::E4M3, Layout::BSHD, causal);
      SKIP_UNLESS_FLASH3_FP8_RUNS(p);
      SCOPED_TRACE(p.describe());
      AttentionProblem bf16 = p;
      bf16.dtype = DType::BF16;
      const Inputs in = random_inputs(bf16, std::random_device{}());
      const E4m3Tensor q = quantized(in.q), k = quantized(in.k), v = quantized(in.v);
      const DeviceRun run = run_e4m3_on_device(p, in, q, k, v);
      auto dequantized = [](const E4m3Tensor& t) {
        std::vector<double> values(t.bytes.size());
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = double(e4m3_bits_to_float(t.bytes[i])) * t.descale;
        return values;
      };
      const Result ref = reference_of_values(p, in, dequantized(q), dequantized(k), dequantized(v), false);
      const double cosine = cosine_similarity(output_values(bf16, run), ref.out);
      EXPECT_GE(cosine, 0.999);
      std::printf("  flash3-fp8 e4m3 %-56s cosine vs fp64 of the e4m3 inputs %.6f\n", p.describe().c_str(), cosine);
    }
}

// e4m3 Q, K, V are read through their strides (multiples of 16 bytes): padded rows give the
// dense result bit for bit; a row stride that is not a 16-byte multiple is refused.
TEST(CudaFlash3Fp8E4m3, PaddedStridesReadLikeDenseOnesAndUnalignedOnesAreRefused) {
  AttentionProblem p = make_problem(2, 4, 2, 300, 333, 128, DType::E4M3, Layout::BHSD, true);
  SKIP_UNLESS_FLASH3_FP8_RUNS(p);
  AttentionProblem bf16 = p;
  bf16.dtype = DType::BF16;
  const Inputs dense = random_inputs(bf16, std::random_device{}());
  const Inputs padded{padded_copy(dense.q, p.layout, 16), padded_copy(dense.k, p.layout, 32),
                      padded_copy(dense.v, p.layout, 48)};
  const DeviceRun want = run_e4m3_on_device(p, dense, quantized(dense.q), quantized(dense.k), quantized(dense.v));
  const DeviceRun got = run_e4m3_on_device(p, padded, quantized(padded.q), quantized(padded.k), quantized(padded.v));
  EXPECT_EQ(std::memcmp(want.out_bits.data(), got.out_bits.data(), want.out_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(want.lse.data(), got.lse.data(), want.lse.size() * 4), 0);

  const Inputs unaligned{padded_copy(dense.q, p.layout, 8), dense.k, dense.v};
  try {
    (void)run_e4m3_on_device(p, unaligned, quantized(unaligned.q), quantized(dense.k), quantized(dense.v));
    ADD_FAILURE() << "flash3-fp8 took e4m3 rows of 136 bytes";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(error.what()).find("q cannot be read in 16-byte pieces"), std::string::npos) << error.what();
  }
}

// Without a GPU too: the dtypes it takes and the one it writes; e4m3 has no backward.
TEST(CudaFlash3Fp8E4m3, TakesBf16AndE4m3Only) {
  const Backend& fp8 = Registry::global().find("flash3-fp8");
  AttentionProblem p = make_problem(1, 2, 2, 128, 128, 128, DType::E4M3, Layout::BSHD, false);
  EXPECT_EQ(p.output_dtype(), DType::BF16);
  EXPECT_FALSE(fp8.supports_backward(p).ok);
  for (const char* name : {"flash3", "flash2", "cuda-vanilla", "sage", "sparge"}) {
    if (!Registry::global().contains(name)) continue;
    const Support support = Registry::global().find(name).supports(p);
    EXPECT_FALSE(support.ok) << name;
    EXPECT_NE(support.reason.find("dtype e4m3 not supported"), std::string::npos) << name << ": " << support.reason;
  }
  if (!cuda_device_missing().empty()) return;
  if (cuda::query_cuda_device(0).compute_capability() != 90) return;
  EXPECT_TRUE(fp8.supports(p).ok) << fp8.supports(p).reason;
  EXPECT_EQ(fp8.plan(p, {})->workspace_bytes(), 256u);
}
#endif  // ATTNSUITE_HAVE_FLASH3

TEST(CudaBackends, RegisteredInOrderWithoutNeedingAGpu) {
  const auto names = Registry::global().names();
  const auto vanilla = std::find(names.begin(), names.end(), "cuda-vanilla");
  const auto flash2 = std::find(names.begin(), names.end(), "flash2");
  ASSERT_NE(vanilla, names.end());
  ASSERT_NE(flash2, names.end());
  EXPECT_LT(vanilla, flash2);
  EXPECT_EQ(Registry::global().find("flash2").display_name(), "flash2 (attnsuite FlashAttention-2-class kernel)");
  const auto flash3 = std::find(names.begin(), names.end(), "flash3");
#if ATTNSUITE_HAVE_FLASH3
  ASSERT_NE(flash3, names.end());
  EXPECT_LT(flash2, flash3);
  const auto flash3_fp8 = std::find(names.begin(), names.end(), "flash3-fp8");
  ASSERT_NE(flash3_fp8, names.end());
  EXPECT_LT(flash3, flash3_fp8);
#else
  EXPECT_EQ(flash3, names.end()) << "flash3 registered in a build without -DATTNSUITE_FLASH3=ON";
  EXPECT_EQ(std::find(names.begin(), names.end(), "flash3-fp8"), names.end());
#endif
}

TEST(CudaBackends, WithoutADeviceSupportsSaysWhyAndContextThrows) {
  if (cuda_device_missing().empty()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  const AttentionProblem p = make_problem(1, 2, 2, 128, 128, 64, DType::F16, Layout::BSHD, false);
  for (const std::string& name : kCudaBackends) {
    const Support support = Registry::global().find(name).supports(p);
    EXPECT_FALSE(support.ok);
    EXPECT_EQ(support.reason.rfind("no CUDA device available", 0), 0u) << support.reason;
  }
  try {
    cuda::make_cuda_context(0);
    ADD_FAILURE() << "make_cuda_context succeeded without a device";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Device);
    EXPECT_EQ(std::string(error.what()).rfind("no CUDA device", 0), 0u) << error.what();
  }
  EXPECT_THROW(cuda::query_cuda_device(0), Error);
}

TEST(CudaContext, AllocatesTrackedMemoryAndTimes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto context = cuda::make_cuda_context(0);
  const cuda::CudaDeviceInfo info = cuda::query_cuda_device(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.l2_bytes, 0u);
  std::printf("  device: %s, cc %d.%d, %d SMs, L2 %zu MiB, %zu MiB, driver %s, runtime %d, clock %.0f MHz\n",
              info.name.c_str(), info.cc_major, info.cc_minor, info.sm_count, info.l2_bytes >> 20,
              info.memory_bytes >> 20, info.driver_version.c_str(), info.runtime_version, context->clock_mhz());

  context->reset_peak_memory();
  {
    auto buffer = context->allocate(std::size_t{64} << 20);
    EXPECT_GE(context->peak_memory_since_reset(), std::size_t{64} << 20);
    context->poison(buffer->data(), buffer->bytes());
    std::uint16_t first = 0;
    context->copy_to_host(&first, buffer->data(), 2);
    EXPECT_EQ(first, 0xFFFF);
    auto timer = context->make_timer();
    context->flush_cache();
    timer->start();
    context->flush_cache();
    timer->stop();
    EXPECT_GT(timer->elapsed_ms(), 0.0);
  }
  EXPECT_GT(context->free_bytes(), 0u);
}

// The GPU fills the benchmark's inputs itself; they must be bitwise the host's values, which
// the fp64 reference reads: every device-capable generator × dtype × layout, odd sizes.
TEST(CudaContext, GeneratesInputsBitwiseEqualToTheHost) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto context = cuda::make_cuda_context(0);
  AttentionProblem p;
  p.batch = 2;
  p.heads_q = 3;
  p.heads_kv = 3;
  p.seq_q = 333;
  p.seq_kv = 333;
  p.head_dim = 72;
  const std::array<std::int64_t, 4> shape{p.batch, p.seq_q, p.heads_q, p.head_dim};
  const std::size_t count = static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]);
  for (const auto& generator : bench::generators()) {
    if (!generator.device_kind) continue;
    std::vector<float> q(count), k(count), v(count);
    generator.fill(p, 1234, q, k, v);
    const std::vector<float>* host[3] = {&q, &k, &v};
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (Layout layout : {Layout::BSHD, Layout::BHSD})
        for (std::uint64_t t = 0; t < 3; ++t) {
          SCOPED_TRACE(generator.name + " " + std::string(to_string(dtype)) + " " + std::string(to_string(layout)) +
                       " tensor " + std::to_string(t));
          auto buffer = context->allocate(count * size_of(dtype));
          context->poison(buffer->data(), buffer->bytes());
          TensorView view;
          view.data = buffer->data();
          view.dtype = dtype;
          view.device = {DeviceType::Cuda, 0};
          view.shape = shape;
          view.strides = TensorView::dense_strides(shape, layout);
          ASSERT_TRUE(context->generate(view, *generator.device_kind,
                                        bench::genmath::tensor_key(*generator.device_kind, 1234, t)));
          std::vector<unsigned char> device_bytes(buffer->bytes());
          context->copy_to_host(device_bytes.data(), buffer->data(), device_bytes.size());
          std::size_t mismatches = 0, dense = 0;
          for (std::int64_t b = 0; b < shape[0]; ++b)
            for (std::int64_t s = 0; s < shape[1]; ++s)
              for (std::int64_t h = 0; h < shape[2]; ++h)
                for (std::int64_t d = 0; d < shape[3]; ++d, ++dense) {
                  unsigned char expected[4];
                  convert_from_float(&(*host[t])[dense], expected, dtype, 1);
                  const auto offset = static_cast<std::size_t>(view.offset(b, s, h, d)) * size_of(dtype);
                  mismatches += std::memcmp(expected, device_bytes.data() + offset, size_of(dtype)) != 0;
                }
          EXPECT_EQ(mismatches, 0u) << "of " << count << " elements";
        }
  }
}

}  // namespace
}  // namespace attnsuite


// --- ring (issue 10): context parallelism over the visible GPUs ------------------------------------
#if ATTNSUITE_HAVE_NCCL
namespace attnsuite {
namespace {
using namespace testing_support;

int visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

// PlanOptions with ring option `key` = `value`.
PlanOptions ring_option(const std::string& key, const std::string& value) {
  PlanOptions options;
  options.options[key] = value;
  return options;
}

// ring on `world` GPUs (ring_world), against the fp64 reference with the kernels' bound;
// odd lengths (chunks of unequal length), causal and not, GQA, fp16 and bf16.
void check_ring(int world) {
  const PlanOptions options = ring_option("ring_world", std::to_string(world));
  for (bool causal : {false, true}) {
    check_backend("ring", make_problem(1, 8, 8, 1024, 1024, 128, DType::BF16, Layout::BSHD, causal), options);
    check_backend("ring",
                  make_problem(2, 8, 2, 1000 + 2 * world + 1, 1000 + 2 * world + 1, 128, DType::BF16, Layout::BSHD,
                               causal),
                  options);
    check_backend("ring", make_problem(1, 4, 1, 777, 777, 64, DType::F16, Layout::BSHD, causal), options);
  }
}

TEST(CudaRing, OneGpuRunsARingOfOne) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_ring(1);
}

TEST(CudaRing, TwoGpus) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs; " << visible_gpus() << " visible";
  check_ring(2);
}

TEST(CudaRing, EveryVisibleGpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (visible_gpus() < 3) GTEST_SKIP() << "needs 3 or more GPUs; " << visible_gpus() << " visible";
  check_ring(visible_gpus());
}

TEST(CudaRing, RefusesWhatItCannotShard) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& ring = Registry::global().find("ring");
  // The reason plan() refuses with (Error(Unsupported)), or "" when it plans.
  const auto refusal = [&](const AttentionProblem& problem, const PlanOptions& options) -> std::string {
    try {
      (void)ring.plan(problem, options);
      return "";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Unsupported) << error.what();
      return error.what();
    }
  };
  const PlanOptions one = ring_option("ring_world", "1");
  AttentionProblem p = make_problem(1, 8, 8, 1024, 512, 128, DType::BF16, Layout::BSHD, true);
  EXPECT_NE(refusal(p, one).find("needs Nq = Nk"), std::string::npos) << refusal(p, one);
  EXPECT_NE(ring.supports(p).reason.find("needs Nq = Nk"), std::string::npos) << ring.supports(p).reason;
  p = make_problem(1, 8, 8, 1024, 1024, 128, DType::BF16, Layout::BHSD, true);
  EXPECT_NE(refusal(p, one).find("needs bshd"), std::string::npos) << refusal(p, one);
  p.layout = Layout::BSHD;
  EXPECT_EQ(refusal(p, one), "");
  const PlanOptions too_many = ring_option("ring_world", std::to_string(visible_gpus() + 1));
  EXPECT_NE(refusal(p, too_many).find("GPUs visible"), std::string::npos) << refusal(p, too_many);
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"ring_mode", "fast"}, {"ring_world", "0"},
                                   {"ring_world", "x"}, {"ring_inputs", "cached"}}) {
    try {
      (void)ring.plan(p, ring_option(key, value));
      ADD_FAILURE() << key << " = " << value << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Usage) << error.what();
    }
  }
  EXPECT_EQ(ring.option_keys(), (std::vector<std::string>{"ring_world", "ring_mode", "ring_inputs"}));
}

// The harness's repeated forwards of one plan with ring_inputs=resident give the same output as
// the first.
TEST(CudaRing, ResidentInputsRepeatTheFirstOutput) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& ring = Registry::global().find("ring");
  const AttentionProblem p = make_problem(1, 8, 2, 999, 999, 128, DType::BF16, Layout::BSHD, true);
  const std::unique_ptr<KernelPlan> plan = ring.plan(p, ring_option("ring_inputs", "resident"));
  const Inputs in = random_inputs(p, 11);
  auto context = cuda::make_cuda_context(0);
  auto q = context->allocate(in.q.bytes()), k = context->allocate(in.k.bytes()), v = context->allocate(in.v.bytes());
  const std::size_t o_bytes = in.q.bytes();
  auto o = context->allocate(o_bytes);
  context->copy_to_device(q->data(), in.q.bits.data(), in.q.bytes());
  context->copy_to_device(k->data(), in.k.bits.data(), in.k.bytes());
  context->copy_to_device(v->data(), in.v.bits.data(), in.v.bytes());
  const Device device = context->device();
  AttentionArgs args;
  args.q = TensorView{q->data(), p.dtype, device, in.q.shape, in.q.strides};
  args.k = TensorView{k->data(), p.dtype, device, in.k.shape, in.k.strides};
  args.v = TensorView{v->data(), p.dtype, device, in.v.shape, in.v.strides};
  args.o = TensorView{o->data(), p.dtype, device, in.q.shape, in.q.strides};
  std::vector<std::uint16_t> first(o_bytes / 2), again(o_bytes / 2);
  plan->forward(args, context->stream());
  context->synchronize();
  context->copy_to_host(first.data(), o->data(), o_bytes);
  for (int repeat = 0; repeat < 3; ++repeat) {
    context->poison(o->data(), o_bytes);
    plan->forward(args, context->stream());
    context->synchronize();
  }
  context->copy_to_host(again.data(), o->data(), o_bytes);
  EXPECT_EQ(first, again);
}

}  // namespace
}  // namespace attnsuite
#endif  // ATTNSUITE_HAVE_NCCL

#endif  // ATTNSUITE_HAVE_CUDA
