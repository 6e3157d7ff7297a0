// flash3 (the Hopper kernel, in builds with -DATTNSUITE_FLASH3=ON): determinism, its schedules
// and tile configs (m192, n176) against the fp64 reference (cuda_test_support.hpp), persistent
// CTAs, strides read by TMA, and its refusals. The shapes every CUDA backend runs are in
// test_cuda_backends.cpp.
//
// Tests that need the kernel skip with the reason where it cannot run (no CUDA device, not
// sm_90); the kernel-config lists and the supports() refusals run everywhere.
#if ATTNSUITE_HAVE_CUDA
#if ATTNSUITE_HAVE_FLASH3

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda_test_support.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

// The flash3 tests that need the kernel itself skip (with the reason) where it cannot run.
#define SKIP_UNLESS_FLASH3_RUNS(problem)                                                \
  do {                                                                                  \
    SKIP_WITHOUT_CUDA_DEVICE();                                                         \
    const Support flash3_support = Registry::global().find("flash3").supports(problem); \
    if (!flash3_support.ok) GTEST_SKIP() << flash3_support.reason;                      \
  } while (0)

// The kernel configs each backend lists, the built-in choice first (Flash3Schedule), without a
// device: flash3 has the tile configs at their head dims (m192, m192-fmaexp at d64; n176 at d128;
// n80 at d256),
// flash3-fp8 the two schedules only.
TEST(CudaFlash3, KernelConfigNamesNeedNoDevice) {
  const Backend& flash3 = Registry::global().find("flash3");
  auto names = [&](const Backend& backend, int head_dim, bool causal, int seq) {
    return backend.kernel_configs(make_problem(1, 2, 2, seq, seq, head_dim, DType::BF16, Layout::BSHD, causal));
  };
  using Names = std::vector<std::string>;
  EXPECT_EQ(names(flash3, 64, false, 64), (Names{"m192", "default", "v1", "grid", "m192-fmaexp"}));
  EXPECT_EQ(names(flash3, 64, true, 1024), (Names{"m192", "default", "v1", "grid", "m192-fmaexp"}));
  EXPECT_EQ(names(flash3, 64, true, 2048), (Names{"m192", "default", "v1", "grid", "m192-fmaexp"}));
  EXPECT_EQ(names(flash3, 128, false, 8192), (Names{"n176", "default", "v1", "grid"}));
  EXPECT_EQ(names(flash3, 128, false, 16384), (Names{"default", "v1", "grid", "n176"}));
  EXPECT_EQ(names(flash3, 128, true, 4096), (Names{"default", "v1", "grid", "n176"}));
  EXPECT_EQ(names(flash3, 128, true, 8192), (Names{"default", "v1", "grid", "n176"}));  // paired (the plan)
  EXPECT_EQ(names(flash3, 128, true, 8193), (Names{"n176", "default", "v1", "grid"}));
  EXPECT_EQ(names(flash3, 256, false, 64), (Names{"default", "v1", "grid", "n80"}));
  EXPECT_EQ(names(Registry::global().find("flash3-fp8"), 128, false, 64), (Names{"default", "v1"}));
}

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
// Checks flash3 on `p` with kernel config `config` forced, and that it ran that config.
void expect_config_matches(const std::string& config, const AttentionProblem& p) {
  EXPECT_EQ(check_backend("flash3", p, with_config(config)), config);
}

// Small cases of m192 for compute-sanitizer (tools/device/run.sh): the partial 192-row Q tile, a
// K tile cut by the sequence end, causal GQA, both warpgroup barriers orders.
TEST(CudaFlash3, M192SmallCases) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false));
  for (const bool causal : {false, true})
    expect_config_matches("m192", make_problem(1, 4, 2, 385, 200, 64, DType::BF16, Layout::BSHD, causal));
  // Not asked for, with no cache entry: the built-in choice (m192 at d64, masked problems longest
  // first on persistent CTAs: the cases of LongestFirstMatchesTheReference);
  if (KernelConfigCache::global().size() == 0) {
    EXPECT_EQ(check_backend("flash3", make_problem(1, 2, 2, 1500, 1500, 64, DType::BF16, Layout::BSHD, true)), "m192");
    EXPECT_EQ(check_backend("flash3", make_problem(1, 2, 2, 1000, 1000, 64, DType::BF16, Layout::BSHD, true)), "m192");
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
  // Dense, 64 keys: the built-in choice at its head dim (listed first) is m192 or n176; the
  // experimental m192-fmaexp is listed last, never chosen without being asked for.
  const std::vector<std::string> configs =
      flash3.kernel_configs(make_problem(1, 2, 2, 64, 64, head_dim, DType::BF16, Layout::BSHD, false));
  const std::vector<std::string> expected =
      head_dim == 64    ? std::vector<std::string>{"m192", "default", "v1", "grid", "m192-fmaexp"}
      : head_dim == 128 ? std::vector<std::string>{"n176", "default", "v1", "grid"}
                        : std::vector<std::string>{"default", "v1", "grid", "n80"};
  ASSERT_EQ(configs, expected);
  for (const DType dtype : {DType::BF16, DType::F16}) {
    for (const TileConfigCase& c : cases) {
      AttentionProblem p =
          make_problem(c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_kv, head_dim, dtype, c.layout, c.causal);
      p.window_left = c.window_left;
      p.window_right = c.window_right;
      expect_config_matches(config, p);
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

// m192's cases (comment above M192SmallCases): partial and single-row Q tiles of 192 rows, 1, 2
// and many K tiles, causal both ways, GQA/MQA, BHSD, windows.
const std::vector<TileConfigCase> kM192Cases = {
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
};

TEST(CudaFlash3, M192MatchesTheReference) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false));
  expect_tile_config_matches_reference("m192", 64, kM192Cases);
}

// Kernel config "m192-fmaexp" (experimental: m192 with 1/8 of the softmax's exponentials on the
// FMA pipe, cuda/common/exp2_fma.hpp): m192's cases against the reference; masked scores still
// give exactly 0 and rows that see no key 0 (the causal seq_q > seq_kv case).
TEST(CudaFlash3, M192FmaExpMatchesTheReference) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false));
  expect_tile_config_matches_reference("m192-fmaexp", 64, kM192Cases);
}

// d128's edge cases of the key tiles (n176's: tiles of exactly 176 and 177 keys; any 128-key
// config's too): one key, odd lengths, cut tiles, the causal diagonal, seq_q != seq_kv both ways,
// GQA/MQA, BHSD, windows.
const std::vector<TileConfigCase> kD128Cases = {
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
};

// Kernel config "n176" (d128 only: 176-key K/V tiles): K tiles that are exactly full (176),
// one key over (177: a second tile of one key), cut by the end of the keys, on the causal
// diagonal at every offset (176 and 128 share no period below 1408 keys), seq_q != seq_kv both
// ways, GQA/MQA, BHSD, windows; fp16 and bf16.
TEST(CudaFlash3, N176MatchesTheReference) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  expect_tile_config_matches_reference("n176", 128, kD128Cases);
}

// Kernel config "n80" (d256 only; 80-key K/V tiles): K tiles
// exactly full (80), one key over (81), cut by the end of the keys, the causal diagonal at offsets
// that 80 and 128 do not share (below 640 keys), seq_q != seq_kv both ways, GQA/MQA, BHSD,
// windows, more works than SMs (persistent CTAs loop); fp16 and bf16.
const std::vector<TileConfigCase> kD256Cases = {
    {1, 2, 2, 1, 1, Layout::BSHD, false, -1, -1},         // one row, one key
    {2, 2, 2, 7, 7, Layout::BSHD, true, -1, -1},          // seq 7 causal
    {1, 2, 2, 100, 80, Layout::BSHD, false, -1, -1},      // exactly one full K tile
    {1, 2, 1, 129, 81, Layout::BHSD, false, -1, -1},      // a second K tile of one key, GQA
    {1, 2, 2, 353, 353, Layout::BSHD, true, -1, -1},      // causal, 5 K tiles, Q tiles 128 + 128 + 97
    {2, 4, 2, 640, 640, Layout::BSHD, true, -1, -1},      // causal GQA, 8 K tiles, 5 Q tiles
    {2, 4, 2, 700, 333, Layout::BSHD, true, -1, -1},      // seq_q > seq_kv: rows and tiles with no key
    {1, 3, 1, 300, 1041, Layout::BSHD, true, -1, -1},     // seq_q < seq_kv causal, MQA, 14 K tiles
    {1, 4, 2, 700, 700, Layout::BHSD, true, 129, -1},     // causal + left window (local), GQA
    {1, 2, 2, 1000, 1000, Layout::BSHD, false, 100, 37},  // two-sided window: tiles skipped on both sides
    {2, 70, 70, 200, 400, Layout::BHSD, false, -1, -1},   // 280 dense works: persistent CTAs loop
};
TEST(CudaFlash3, N80MatchesTheReference) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 256, DType::BF16, Layout::BSHD, false));
  expect_tile_config_matches_reference("n80", 256, kD256Cases);
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

// forward_order=longest-first and paired, refused without a device: a value it does not have, a
// head dim or a kernel config beside it without a kernel in that order (launch.cu's table).
TEST(CudaFlash3, LongestFirstRefusalsNeedNoDevice) {
  const Backend& flash3 = Registry::global().find("flash3");
  EXPECT_EQ(options_usage_error(flash3, {{"forward_order", "shortest-first"}}),
            "flash3: backend option forward_order='shortest-first' not allowed; allowed: head-major, longest-first, "
            "paired");
  PlanOptions options;
  options.options = {{"forward_order", "longest-first"}};
  EXPECT_NO_THROW(flash3.check_options(options.options));
  const auto refusal = [&](const AttentionProblem& p, const PlanOptions& o) {
    try {
      (void)flash3.plan(p, o);
      ADD_FAILURE() << "planned " << p.describe();
      return std::pair{ErrorKind::Internal, std::string()};
    } catch (const Error& error) {
      return std::pair{error.kind(), std::string(error.what())};
    }
  };
  EXPECT_EQ(refusal(make_problem(1, 2, 2, 300, 300, 256, DType::BF16, Layout::BSHD, true), options),
            std::pair(ErrorKind::Unsupported,
                      std::string("flash3: forward_order=longest-first is built for m192 at head dim 64, the default "
                                  "tiles at head dim 64, the default tiles at head dim 128; not for the default tiles "
                                  "at head dim 256")));
  PlanOptions with_n176 = options;
  with_n176.kernel_config = "n176";
  EXPECT_EQ(refusal(make_problem(1, 2, 2, 300, 300, 128, DType::BF16, Layout::BSHD, true), with_n176),
            std::pair(ErrorKind::Unsupported,
                      std::string("flash3: forward_order=longest-first is built for m192 at head dim 64, the default "
                                  "tiles at head dim 64, the default tiles at head dim 128; not for n176 at head dim "
                                  "128")));
  PlanOptions with_m192 = options;
  with_m192.kernel_config = "m192";
  EXPECT_EQ(refusal(make_problem(1, 2, 2, 300, 300, 128, DType::BF16, Layout::BSHD, true), with_m192).second,
            "flash3: forward_order=longest-first is built for m192 at head dim 64, the default tiles at head dim 64, "
            "the default tiles at head dim 128; not for m192 at head dim 128");
  // Paired: m192 at d64 and the default tiles at d128 and d256 only.
  PlanOptions paired;
  paired.options = {{"forward_order", "paired"}};
  EXPECT_NO_THROW(flash3.check_options(paired.options));
  EXPECT_EQ(refusal(make_problem(1, 2, 2, 300, 300, 64, DType::BF16, Layout::BSHD, true), paired),
            std::pair(ErrorKind::Unsupported,
                      std::string("flash3: forward_order=paired is built for m192 at head dim 64, the default tiles "
                                  "at head dim 128, the default tiles at head dim 256; not for the default tiles at "
                                  "head dim 64")));
  PlanOptions paired_n176 = paired;
  paired_n176.kernel_config = "n176";
  EXPECT_EQ(refusal(make_problem(1, 2, 2, 300, 300, 128, DType::BF16, Layout::BSHD, true), paired_n176).second,
            "flash3: forward_order=paired is built for m192 at head dim 64, the default tiles at head dim 128, the "
            "default tiles at head dim 256; not for n176 at head dim 128");
}

// forward_order=longest-first: persistent CTAs on every
// problem, the works in bands of one query tile over all heads — n176's cases (odd lengths,
// seq_q != seq_kv both ways, GQA/MQA, BHSD, windows), then more works than SMs, causal and not,
// so that every CTA runs several of different heads; fp16 and bf16, d64 (default tiles and m192:
// asked for, m192's built-in order, and its grid by forward_order=head-major) and d128.
TEST(CudaFlash3, LongestFirstMatchesTheReference) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  PlanOptions options;
  options.options = {{"forward_order", "longest-first"}};
  // n176's cases (the same edge cases at either head dim), then more works than SMs.
  std::vector<TileConfigCase> cases = kD128Cases;
  cases.push_back({2, 32, 8, 600, 600, Layout::BSHD, true, -1, -1});
  cases.push_back({2, 32, 8, 600, 600, Layout::BHSD, false, -1, -1});

  for (const int head_dim : {64, 128})
    for (const DType dtype : {DType::BF16, DType::F16})
      for (const TileConfigCase& c : cases) {
        AttentionProblem p =
            make_problem(c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_kv, head_dim, dtype, c.layout, c.causal);
        p.window_left = c.window_left;
        p.window_right = c.window_right;
        EXPECT_EQ(check_backend("flash3", p, options), "default");
        if (head_dim == 64) {
          PlanOptions m192 = options;
          m192.kernel_config = "m192";
          EXPECT_EQ(check_backend("flash3", p, m192), "m192");
          // The built-in order (no option) and the grid (head-major) of m192.
          if (KernelConfigCache::global().size() == 0) {
            EXPECT_EQ(check_backend("flash3", p), "m192");
          }
          m192.options = {{"forward_order", "head-major"}};
          EXPECT_EQ(check_backend("flash3", p, m192), "m192");
        }
      }
}

// forward_order=paired, the built-in order of causal problems (m192 at d64, the default tiles at
// d128 and d256): persistent CTAs on every problem, units of a head's longest and shortest query
// tiles (the middle one alone after every pair when their number is odd) — n176's cases, then more
// units than SMs with an odd and an even number of query tiles, causal and not; fp16 and bf16.
TEST(CudaFlash3, PairedMatchesTheReference) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  std::vector<TileConfigCase> cases = kD128Cases;
  cases.push_back({2, 32, 8, 600, 600, Layout::BSHD, true, -1, -1});   // 5 tiles of 128 rows, 4 of 192
  cases.push_back({2, 32, 8, 500, 500, Layout::BHSD, true, -1, -1});   // 4 of 128, 3 of 192
  cases.push_back({2, 32, 8, 600, 600, Layout::BHSD, false, -1, -1});  // dense
  for (const int head_dim : {64, 128, 256})
    for (const DType dtype : {DType::BF16, DType::F16})
      for (const TileConfigCase& c : cases) {
        AttentionProblem p =
            make_problem(c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_kv, head_dim, dtype, c.layout, c.causal);
        p.window_left = c.window_left;
        p.window_right = c.window_right;
        PlanOptions options;
        options.options = {{"forward_order", "paired"}};
        if (head_dim == 64) options.kernel_config = "m192";
        EXPECT_EQ(check_backend("flash3", p, options), head_dim == 64 ? "m192" : "default");
        // The built-in config of causal problems (paired where flash3.cpp's builtin_order says).
        if (KernelConfigCache::global().size() == 0 && p.causal) {
          EXPECT_EQ(check_backend("flash3", p), Registry::global().find("flash3").kernel_configs(p).front());
        }
      }
}

// The work order each plan names (result rows' work_order): the built-in one of causal problems
// (paired), of dense ones (persistent CTAs), the grid where head-major is asked for on a causal
// problem, longest first when asked, and one CTA per work on a two-sided window.
TEST(CudaFlash3, PlansNameTheirWorkOrder) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  const Backend& flash3 = Registry::global().find("flash3");
  const auto order_of = [&](const AttentionProblem& p, const char* order = nullptr, const char* config = "") {
    PlanOptions options;
    options.kernel_config = config;
    if (order != nullptr) options.options = {{"forward_order", order}};
    return std::string(flash3.plan(p, options)->work_order());
  };
  const AttentionProblem causal = make_problem(2, 16, 4, 1000, 1000, 128, DType::BF16, Layout::BSHD, true);
  const AttentionProblem dense = make_problem(2, 16, 4, 1000, 1000, 128, DType::BF16, Layout::BSHD, false);
  AttentionProblem window = dense;
  window.window_left = 100;
  window.window_right = 50;
  if (KernelConfigCache::global().size() == 0) {
    EXPECT_EQ(order_of(causal), "paired");
    EXPECT_EQ(order_of(dense), "persistent");
    EXPECT_EQ(order_of(window), "grid");
  }
  EXPECT_EQ(order_of(causal, "paired"), "paired");
  EXPECT_EQ(order_of(causal, "head-major"), "grid");
  EXPECT_EQ(order_of(dense, "head-major"), "persistent");
  EXPECT_EQ(order_of(dense, "longest-first"), "longest-first");
  EXPECT_EQ(order_of(dense, nullptr, "v1"), "persistent");
}

// Small cases of an ordered schedule for compute-sanitizer (tools/device/run.sh): 420 works,
// causal with seq_q > seq_kv (rows 0..199 see no key: works without a key between those with
// keys) at d128, 280 dense ones, `third`, and the causal case at d64 with m192.
void check_ordered_small_cases(const char* order, const AttentionProblem& third) {
  PlanOptions options;
  options.options = {{"forward_order", order}};
  check_backend("flash3", make_problem(2, 70, 10, 300, 100, 128, DType::BF16, Layout::BSHD, true), options);
  check_backend("flash3", make_problem(1, 140, 140, 200, 200, 128, DType::F16, Layout::BHSD, false), options);
  check_backend("flash3", third, options);
  options.kernel_config = "m192";
  check_backend("flash3", make_problem(2, 70, 10, 300, 100, 64, DType::BF16, Layout::BSHD, true), options);
}

// Paired: the causal d256 case has 3 query tiles of 128 rows (a middle tile alone); m192's have 2
// of 192.
TEST(CudaFlash3, PairedSmallCases) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  check_ordered_small_cases("paired", make_problem(1, 12, 4, 300, 300, 256, DType::BF16, Layout::BSHD, true));
}

// Longest first: the causal case at d64 with the default tiles too.
TEST(CudaFlash3, LongestFirstSmallCases) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  check_ordered_small_cases("longest-first", make_problem(2, 70, 10, 300, 100, 64, DType::F16, Layout::BSHD, true));
}

// Small cases of n80 for compute-sanitizer: a partial last K tile, causal and not, 140 dense
// works (persistent CTAs loop).
TEST(CudaFlash3, N80SmallCases) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 256, DType::BF16, Layout::BSHD, false));
  for (const bool causal : {false, true})
    expect_config_matches("n80", make_problem(1, 4, 2, 200, 385, 256, DType::BF16, Layout::BSHD, causal));
  expect_config_matches("n80", make_problem(1, 140, 140, 100, 170, 256, DType::F16, Layout::BHSD, false));
}

// Small cases of n176 for compute-sanitizer (tools/device/run.sh): a K tile cut by the
// sequence end, causal GQA, a second Q tile.
TEST(CudaFlash3, N176SmallCases) {
  SKIP_UNLESS_FLASH3_RUNS(make_problem(1, 2, 2, 64, 64, 128, DType::BF16, Layout::BSHD, false));
  for (const bool causal : {false, true})
    expect_config_matches("n176", make_problem(1, 4, 2, 200, 385, 128, DType::BF16, Layout::BSHD, causal));
}

// m192 (and the experimental m192-fmaexp) is listed for head dim 64 only, n176 for head dim 128 only, n80
// (experimental) for 256 only, and only by flash3 (flash3-fp8 has no such kernels); the built-in choice first
// (flash3.hpp). choose_kernel_config, which plan() asks, takes a listed config and refuses any other naming the listed
// ones. Host only (no plan is made, no kernel-config cache read): runs everywhere, CI included.
TEST(CudaFlash3, M192IsAConfigOfHeadDim64Only) {
  const Backend& flash3 = Registry::global().find("flash3");
  for (const int head_dim : {64, 128, 256}) {
    const std::vector<std::string> configs =
        flash3.kernel_configs(make_problem(1, 2, 2, 300, 300, head_dim, DType::F16, Layout::BSHD, true));
    EXPECT_EQ(configs, head_dim == 64    ? (std::vector<std::string>{"m192", "default", "v1", "grid", "m192-fmaexp"})
                       : head_dim == 128 ? (std::vector<std::string>{"default", "v1", "grid", "n176"})
                                         : (std::vector<std::string>{"n80", "default", "v1", "grid"}))
        << "d" << head_dim;
  }
  // The built-in choice where it is a tile config: d64, d128 dense up to 8k keys or causal above
  // 8k rows.
  EXPECT_EQ(flash3.kernel_configs(make_problem(1, 2, 2, 1500, 1500, 64, DType::F16, Layout::BSHD, true)),
            (std::vector<std::string>{"m192", "default", "v1", "grid", "m192-fmaexp"}));
  EXPECT_EQ(flash3.kernel_configs(make_problem(1, 2, 2, 300, 9000, 128, DType::F16, Layout::BSHD, false)),
            (std::vector<std::string>{"default", "v1", "grid", "n176"}));
  EXPECT_EQ(flash3.kernel_configs(make_problem(1, 2, 2, 8193, 8193, 128, DType::F16, Layout::BSHD, true)),
            (std::vector<std::string>{"n176", "default", "v1", "grid"}));
  // ... but not with a left window (paired default tiles, flash3.cpp); n80 at d256 dense from 1k
  // keys, causal up to 512 rows and above 4k.
  AttentionProblem windowed = make_problem(1, 2, 2, 16384, 16384, 128, DType::F16, Layout::BSHD, true);
  windowed.window_left = 256;
  EXPECT_EQ(flash3.kernel_configs(windowed).front(), "default");
  const auto d256_builtin = [&](int seq, bool causal) {
    return flash3.kernel_configs(make_problem(1, 2, 2, seq, seq, 256, DType::F16, Layout::BSHD, causal)).front();
  };
  EXPECT_EQ(d256_builtin(512, false), "default");
  EXPECT_EQ(d256_builtin(1024, false), "n80");
  EXPECT_EQ(d256_builtin(512, true), "n80");
  EXPECT_EQ(d256_builtin(513, true), "default");
  EXPECT_EQ(d256_builtin(4096, true), "default");
  EXPECT_EQ(d256_builtin(4097, true), "n80");

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
            "flash3: kernel config 'm256' unknown for this problem; allowed: m192, default, v1, grid, m192-fmaexp");
  // Not asked for, no cache entry: the built-in choice.
  options.kernel_config.clear();
  EXPECT_EQ(choose_kernel_config(flash3, d64, options), "m192");

  const Backend& fp8 = Registry::global().find("flash3-fp8");
  const AttentionProblem fp8_problem = make_problem(1, 2, 2, 300, 300, 64, DType::BF16, Layout::BSHD, false);
  EXPECT_EQ(fp8.kernel_configs(fp8_problem), (std::vector<std::string>{"default", "v1"}));
  for (const char* config : {"m192", "m192-fmaexp", "n176", "grid"})
    EXPECT_FALSE(refusal(fp8, fp8_problem, config).empty());
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
    EXPECT_EQ(support.reason,
              "flash3 needs sm_90 (Hopper); this GPU is sm_" + std::to_string(info.compute_capability()));
  }
}

}  // namespace
}  // namespace attnsuite

#endif  // ATTNSUITE_HAVE_FLASH3
#endif  // ATTNSUITE_HAVE_CUDA
