// The harness: statistics, suite parsing, the runner on fake backends, the sweep with resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <tuple>

#include "attnsuite/error.hpp"
#include "attnsuite/registry.hpp"
#include "bench/generators.hpp"
#include "bench/plan.hpp"
#include "bench/runner.hpp"
#include "bench/statistics.hpp"
#include "core/cancel.hpp"
#include "cpu/common.hpp"
#include "cpu/cpu_backends.hpp"
#include "fake_backend_support.hpp"
#include "report/jsonl.hpp"
#include "report/sweep.hpp"

namespace fs = std::filesystem;
using namespace attnsuite;
using namespace attnsuite::bench;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attnsuite_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// A backend whose behaviour a test chooses: exact (fp64 reference per slice), unwritten output,
// unsupported, or throwing out-of-memory.
class FakeBackend final : public Backend {
 public:
  enum class Mode { Exact, LeaveUnwritten, Unsupported, OutOfMemory, BackwardUnwritten };
  FakeBackend(std::string name, Mode mode, std::atomic<int>* calls)
      : name_(std::move(name)), mode_(mode), calls_(calls) {}
  std::string_view name() const override { return name_; }
  std::string_view display_name() const override { return name_; }
  Device device() const override { return {}; }
  std::string capabilities() const override { return "test"; }
  Support supports(const AttentionProblem&) const override {
    return mode_ == Mode::Unsupported ? Support::no("fake: never supported") : Support::yes();
  }
  Support supports_backward(const AttentionProblem& p) const override {
    return mode_ == Mode::BackwardUnwritten ? Support::yes() : Backend::supports_backward(p);
  }
  std::unique_ptr<KernelPlan> plan(const AttentionProblem& p, const PlanOptions&) const override {
    require_support(*this, p);
    auto plan = std::make_unique<FunctionPlan>(
        "", 0, [this, p](const AttentionArgs& args, Stream, RunReport&) { run(p, args); },
        [](const BackwardArgs&, Stream, RunReport&) {});  // asked only where supports_backward says yes
    if (mode_ == Mode::Exact) plan->set_work_order("one-cta-per-" + std::to_string(p.seq_q) + "-rows");
    return plan;
  }

 private:
  void run(const AttentionProblem& p, const AttentionArgs& args) const {
    if (calls_) ++*calls_;
    if (mode_ == Mode::OutOfMemory) throw Error(ErrorKind::OutOfMemory, "fake: out of memory, needs 9 GiB, 1 GiB free");
    if (mode_ == Mode::LeaveUnwritten) return;
    testing_support::write_reference_output(p, args);
  }

  std::string name_;
  Mode mode_;
  std::atomic<int>* calls_;
};

SweepSpec small_spec(std::vector<std::string> backends) {
  SweepSpec spec;
  spec.name = "test";
  spec.backends = std::move(backends);
  spec.dtypes = {DType::F32};
  spec.batches = {1, 2};
  spec.seq_q = {7, 33};
  spec.heads = {{2, 1, 32, ""}};
  spec.timing.cold = false;
  spec.timing.measure.warmup_reps = 0;
  spec.timing.measure.min_reps = 2;
  spec.timing.measure.max_reps = 3;
  return spec;
}

}  // namespace

TEST(Statistics, SummaryOfKnownSamples) {
  const Statistics s = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_NEAR(s.stddev, std::sqrt(2.5), 1e-12);
  EXPECT_NEAR(s.p05, 1.2, 1e-12);  // numpy.percentile([1..5], 5)
  EXPECT_NEAR(s.p95, 4.8, 1e-12);
}

TEST(Statistics, ConstantTimerStopsAtMinReps) {
  MeasureOptions options;
  options.warmup_reps = 2;
  options.min_reps = 7;
  int warmups = 0;
  const Measurement m = measure([&] { ++warmups; }, [] { return 1.0; }, options);
  EXPECT_EQ(warmups, 2);
  EXPECT_EQ(m.stats.count, 7);
  EXPECT_TRUE(m.converged);
  EXPECT_DOUBLE_EQ(m.stats.median, 1.0);
}

TEST(Statistics, NoisyTimerRunsUntilTheBudget) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> noise(0.5, 1.5);
  MeasureOptions options;
  options.noise_target = 1e-5;  // unreachable
  options.max_time_ms = 100;    // samples of ~1 ms: stops near 100 samples
  const Measurement m = measure([] {}, [&] { return noise(rng); }, options);
  EXPECT_FALSE(m.converged);
  EXPECT_GE(m.stats.count, 60);
  EXPECT_LE(m.stats.count, 200);
}

TEST(Statistics, NoisyTimerConvergesToTheNoiseTarget) {
  std::mt19937 rng(2);
  std::normal_distribution<double> noise(10.0, 0.5);  // 5% spread per sample
  MeasureOptions options;
  options.noise_target = 0.005;
  options.max_time_ms = 1e9;
  const Measurement m = measure([] {}, [&] { return noise(rng); }, options);
  EXPECT_TRUE(m.converged);
  EXPECT_LT(m.stats.relative_median_error(), 0.005);
  EXPECT_GE(m.stats.count, 100);  // (1.25 · 0.05 / 0.005)² ≈ 156
}

TEST(Plan, ParsesAndExpandsWithBackendsInnermost) {
  const auto spec = parse_suite(nlohmann::json::parse(R"({"backends": ["a", "b"], "dtype": ["fp16", "bf16"],
      "batch": [1, 4], "seq": [128, 256], "model": "llama-3.2-1b", "causal": [false, true]})"),
                                "t");
  const auto cases = expand(spec);
  ASSERT_EQ(cases.size(), 2u * 2 * 2 * 2 * 2);
  EXPECT_EQ(cases[0].backend, "a");
  EXPECT_EQ(cases[1].backend, "b");
  EXPECT_EQ(cases[0].problem.heads_q, 32);
  EXPECT_EQ(cases[0].problem.heads_kv, 8);
  EXPECT_EQ(cases[0].problem.head_dim, 64);
  EXPECT_EQ(cases[0].model, "llama-3.2-1b");
}

TEST(Plan, TokensPerBatchSetsTheBatch) {
  const auto spec = parse_suite(nlohmann::json::parse(R"({"backends": "a", "tokens_per_batch": 16384,
      "seq": [512, 5000, 16384]})"),
                                "t");
  const auto cases = expand(spec);
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0].problem.batch, 32);
  EXPECT_EQ(cases[1].problem.batch, 3);  // rounded down
  EXPECT_EQ(cases[2].problem.batch, 1);
  // Fewer tokens than a sequence would be batch 0: refused (it used to run batch 1 unsaid).
  try {
    parse_suite(nlohmann::json::parse(R"({"backends": "a", "tokens_per_batch": 16384, "seq": [512, 32768]})"), "t");
    ADD_FAILURE() << "tokens_per_batch below a seq was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(error.what()).find("is fewer than seq 32768"), std::string::npos) << error.what();
  }
}

TEST(Plan, HiddenSetsHeadsPerHeadDim) {
  const auto spec =
      parse_suite(nlohmann::json::parse(R"({"backends": "a", "hidden": 2048, "head_dim": [64, 128]})"), "t");
  ASSERT_EQ(spec.heads.size(), 2u);
  EXPECT_EQ(spec.heads[0].heads_q, 32);
  EXPECT_EQ(spec.heads[1].heads_q, 16);
  EXPECT_EQ(spec.heads[1].heads_kv, 16);
}

TEST(Plan, ImpossibleCombinationIsRecordedNotDropped) {
  const auto spec = parse_suite(nlohmann::json::parse(R"({"backends": "a", "heads": 6, "kv_heads": 4})"), "t");
  const auto cases = expand(spec);
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_NE(cases[0].invalid_reason.find("not divisible"), std::string::npos);
}

TEST(Plan, BadSuitesGiveOneClearError) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      (void)parse_suite(nlohmann::json::parse(text), "s");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of(R"({"backends": "a", "bacth": [1]})").find("unknown key 'bacth'"), std::string::npos);
  EXPECT_NE(error_of(R"({"backends": "a", "batch": [0]})").find("'batch' = 0 is out of range"), std::string::npos);
  EXPECT_NE(error_of(R"({"backends": "a", "batch": ["x"]})").find("must be an integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"backends": "a", "batch": [1e300]})").find("must be an integer"), std::string::npos);
  EXPECT_NE(error_of(R"({"backends": "a", "seq": 99999999999})").find("out of range"), std::string::npos);
  EXPECT_NE(error_of(R"({"backends": "a", "dtype": "fp4"})").find("allowed: fp32, fp16, bf16, e4m3"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"backends": "a", "model": "gpt-9"})").find("unknown model 'gpt-9'"), std::string::npos);
  EXPECT_NE(error_of(R"({"backends": "a", "generator": "zeros"})").find("unknown input generator"), std::string::npos);
  EXPECT_NE(error_of(R"({"dtype": "fp16"})").find("'backends' is missing"), std::string::npos);
  EXPECT_NE(error_of(R"([1, 2])").find("must be an object"), std::string::npos);
  EXPECT_NE(error_of(R"({"backends": "a", "timing": {"noise": -1}})").find("timing.noise"), std::string::npos);
}

TEST(Plan, MalformedAndTomlFiles) {
  const fs::path dir = fresh_dir("suites");
  fs::create_directories(dir);
  {
    std::ofstream(dir / "bad.json") << "{\"backends\": [\"a\",";
    std::ofstream(dir / "ok.toml") << "backends = [\"cpu-flash\"]\nbatch = [1, 2]\nseq = 64\n[timing]\nnoise = 0.05\n";
    std::ofstream(dir / "bad.toml") << "backends = [\"a\"\nbatch = \n";
  }
  try {
    (void)load_suite_json((dir / "bad.json").string());
    FAIL() << "malformed JSON accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("malformed JSON"), std::string::npos);
  }
  try {
    (void)load_suite_json((dir / "bad.toml").string());
    FAIL() << "malformed TOML accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("malformed TOML"), std::string::npos);
  }
  const auto spec = parse_suite(load_suite_json((dir / "ok.toml").string()), "ok.toml");
  EXPECT_EQ(spec.batches, (std::vector<int>{1, 2}));
  EXPECT_EQ(spec.seq_q, (std::vector<int>{64}));
  EXPECT_DOUBLE_EQ(spec.timing.measure.noise_target, 0.05);
  EXPECT_THROW((void)load_suite_json("no-such-suite"), Error);
  fs::remove_all(dir);
}

TEST(Plan, EverySuiteInTheRepoParses) {
  for (const auto& name : embedded_suite_names()) {
    SCOPED_TRACE(name);
    const auto spec = parse_suite(load_suite_json(name), name);
    EXPECT_FALSE(expand(spec).empty());
  }
}

TEST(Runner, OkSkippedAndFailedRows) {
  Registry registry;
  registry.add("exact", [] { return std::make_unique<FakeBackend>("exact", FakeBackend::Mode::Exact, nullptr); });
  registry.add("unwritten",
               [] { return std::make_unique<FakeBackend>("unwritten", FakeBackend::Mode::LeaveUnwritten, nullptr); });
  registry.add("never", [] { return std::make_unique<FakeBackend>("never", FakeBackend::Mode::Unsupported, nullptr); });
  registry.add("oom", [] { return std::make_unique<FakeBackend>("oom", FakeBackend::Mode::OutOfMemory, nullptr); });
  SweepSpec spec = small_spec({"exact", "unwritten", "never", "oom", "missing"});
  spec.batches = {1};
  spec.seq_q = {33};
  Runner runner(spec, registry);
  std::vector<ResultRow> rows;
  for (const auto& c : expand(spec)) rows.push_back(*runner.run(c));
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0].status, CaseStatus::Ok) << rows[0].reason;
  EXPECT_LT(*rows[0].rel_l2, 1e-6);
  EXPECT_NEAR(*rows[0].cos_sim, 1.0, 1e-9);
  EXPECT_GT(*rows[0].tflops, 0.0);
  EXPECT_EQ(rows[0].work_order, "one-cta-per-33-rows");  // the plan's, as planned for this case
  EXPECT_EQ(rows[1].work_order, "");
  EXPECT_EQ(rows[1].status, CaseStatus::Failed);  // poisoned output never written: NaN never passes
  EXPECT_NE(rows[1].reason.find("NaN"), std::string::npos);
  EXPECT_EQ(rows[2].status, CaseStatus::Skipped);
  EXPECT_EQ(rows[2].reason, "fake: never supported");
  EXPECT_EQ(rows[3].status, CaseStatus::Failed);
  EXPECT_NE(rows[3].reason.find("out of memory"), std::string::npos);
  EXPECT_EQ(rows[4].status, CaseStatus::Failed);
  EXPECT_NE(rows[4].reason.find("unknown backend 'missing'"), std::string::npos);
}

// A cancel request (the CLI's SIGINT/SIGTERM handler makes it) stops the loops of a case —
// parallel_for's items, the fp64 reference's rows, the timing — and the runner drops the
// unfinished case; outside a CancellableScope (a library user's forward) nothing stops.
TEST(Runner, ACancelRequestStopsOnlyCancellableWork) {
  struct Clear {
    ~Clear() { clear_cancel(); }
  } clear;
  request_cancel();
  std::atomic<int> items{0};
  cpu::parallel_for(64, 2, [&](std::int64_t, int) { ++items; });
  EXPECT_EQ(items.load(), 64);
  {
    const CancellableScope scope;
    items = 0;
    try {
      cpu::parallel_for(64, 2, [&](std::int64_t, int) { ++items; });
      ADD_FAILURE() << "parallel_for ran to its end under a cancel request";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Cancelled) << error.what();
    }
    EXPECT_EQ(items.load(), 0);
  }
  const SweepSpec spec = small_spec({"cpu-flash", "reference"});
  Runner runner(spec, Registry::global());
  for (const Case& c : expand(spec)) EXPECT_FALSE(runner.run(c).has_value()) << c.backend;  // not recorded
  clear_cancel();
  const std::optional<ResultRow> row = runner.run(expand(spec).front());
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->status, CaseStatus::Ok) << row->reason;
}

TEST(Runner, SamplesHeadsForLargeReferences) {
  Registry registry;
  registry.add("exact", [] { return std::make_unique<FakeBackend>("exact", FakeBackend::Mode::Exact, nullptr); });
  SweepSpec spec = small_spec({"exact"});
  spec.batches = {2};
  spec.seq_q = {64};
  spec.heads = {{8, 8, 32, ""}};
  spec.reference_gflop = 4.0 * 64 * 64 * 32 * 4 * 1e-9;  // room for a quarter of the rows
  Runner runner(spec, registry);
  const auto row = *runner.run(expand(spec).front());
  ASSERT_EQ(row.status, CaseStatus::Ok) << row.reason;
  EXPECT_DOUBLE_EQ(*row.accuracy_fraction, 0.25);
  EXPECT_LT(*row.rel_l2, 1e-6);
}

// The backward passes: the fp64 `reference` backend's gradients read as exact against the
// harness's reference slices (GQA, causal with seq_q > seq_kv so that some rows see no key);
// FLOPs are 2.5× and 3.5× the forward's; a backend without a backward is skipped with its reason;
// a gradient never written (poisoned) fails.
TEST(Runner, BackwardPassesCheckEachGradient) {
  SweepSpec spec = small_spec({"reference", "cpu-vanilla-nobwd", "unwritten-bwd"});
  spec.batches = {2};
  spec.seq_q = {40};
  spec.seq_kv = {33};
  spec.causal = {true};
  spec.heads = {{4, 2, 32, ""}};
  spec.passes = {Pass::Forward, Pass::Backward, Pass::ForwardBackward};
  Registry registry;
  registry.add("reference", [] { return cpu::make_reference_backend(); });
  registry.add("cpu-vanilla-nobwd",
               [] { return std::make_unique<FakeBackend>("cpu-vanilla-nobwd", FakeBackend::Mode::Exact, nullptr); });
  registry.add("unwritten-bwd", [] {
    return std::make_unique<FakeBackend>("unwritten-bwd", FakeBackend::Mode::BackwardUnwritten, nullptr);
  });
  Runner runner(spec, registry);
  std::map<std::string, ResultRow> rows;
  for (const auto& c : expand(spec)) {
    const ResultRow row = *runner.run(c);
    rows[row.backend + " " + row.pass] = row;
  }
  ASSERT_EQ(rows.size(), 9u);
  const ResultRow& fwd = rows["reference fwd"];
  for (const char* pass : {"bwd", "fwd+bwd"}) {
    SCOPED_TRACE(pass);
    const ResultRow& row = rows[std::string("reference ") + pass];
    ASSERT_EQ(row.status, CaseStatus::Ok) << row.reason;
    for (const auto* column : {&row.dq_rel_l2, &row.dk_rel_l2, &row.dv_rel_l2}) {
      ASSERT_TRUE(column->has_value());
      EXPECT_LT(**column, 1e-6);
    }
    EXPECT_NEAR(*row.dq_cos_sim, 1.0, 1e-9);
    EXPECT_DOUBLE_EQ(*row.rel_l2, std::max({*row.dq_rel_l2, *row.dk_rel_l2, *row.dv_rel_l2}));
    EXPECT_DOUBLE_EQ(*row.accuracy_fraction, 1.0);
    const double factor = std::string(pass) == "bwd" ? 2.5 : 3.5;
    EXPECT_NEAR(*row.tflops * *row.ms_median, factor * *fwd.tflops * *fwd.ms_median,
                1e-9 * factor * *fwd.tflops * *fwd.ms_median);
    EXPECT_NE(row.shape_key(), fwd.shape_key());
  }
  EXPECT_EQ(rows["cpu-vanilla-nobwd bwd"].status, CaseStatus::Skipped);
  EXPECT_NE(rows["cpu-vanilla-nobwd bwd"].reason.find("has no backward"), std::string::npos);
  EXPECT_EQ(rows["cpu-vanilla-nobwd fwd"].status, CaseStatus::Ok);
  EXPECT_EQ(rows["unwritten-bwd bwd"].status, CaseStatus::Failed);
  EXPECT_NE(rows["unwritten-bwd bwd"].reason.find("NaN"), std::string::npos) << rows["unwritten-bwd bwd"].reason;
}

TEST(Plan, PassAxis) {
  const SweepSpec spec =
      parse_suite(nlohmann::json::parse(R"({"backends": ["reference"], "pass": ["fwd", "fwd+bwd"]})"), "t");
  ASSERT_EQ(spec.passes.size(), 2u);
  const auto cases = expand(spec);
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0].pass, Pass::Forward);
  EXPECT_EQ(cases[1].pass, Pass::ForwardBackward);
  EXPECT_THROW(parse_suite(nlohmann::json::parse(R"({"backends": ["reference"], "pass": ["backward"]})"), "t"), Error);
  EXPECT_EQ(flops_factor(Pass::Backward), 2.5);
  EXPECT_EQ(parse_pass("fwd+bwd"), Pass::ForwardBackward);
}

// Sampled rows must agree with the full reference, masks included: the same exact backend
// compared on a tiny budget still reads as exact.
TEST(Runner, SampledRowsAreExactUnderMasks) {
  Registry registry;
  registry.add("exact", [] { return std::make_unique<FakeBackend>("exact", FakeBackend::Mode::Exact, nullptr); });
  for (auto [seq_q, seq_kv, causal, left] : {std::tuple{48, 80, true, -1}, std::tuple{80, 48, true, -1},
                                             std::tuple{64, 64, false, 5}, std::tuple{64, 64, true, 7}}) {
    SweepSpec spec = small_spec({"exact"});
    spec.batches = {2};
    spec.seq_q = {seq_q};
    spec.seq_kv = {seq_kv};
    spec.causal = {causal};
    spec.window_left = left;
    spec.heads = {{4, 2, 32, ""}};
    spec.reference_gflop = 1e-5;  // a handful of rows
    Runner runner(spec, registry);
    const auto row = *runner.run(expand(spec).front());
    ASSERT_EQ(row.status, CaseStatus::Ok) << row.reason;
    EXPECT_LT(*row.accuracy_fraction, 0.5);
    EXPECT_LT(*row.rel_l2, 1e-6) << seq_q << " " << seq_kv << " " << causal << " " << left;
    EXPECT_EQ(row.reason.find("log-sum-exp"), std::string::npos) << row.reason;  // LSE agrees too
  }
}

TEST(Sweep, InterruptedThenResumedRunsEachCaseOnce) {
  std::atomic<int> calls{0};
  Registry registry;
  registry.add("exact", [&] { return std::make_unique<FakeBackend>("exact", FakeBackend::Mode::Exact, &calls); });
  const SweepSpec spec = small_spec({"exact"});
  const std::size_t total = expand(spec).size();
  ASSERT_EQ(total, 4u);
  const fs::path dir = fresh_dir("resume");

  SweepOptions options;
  options.out_dir = dir;
  std::size_t finished = 0;
  options.on_progress = [&](const SweepProgress& p) { finished += p.finished != nullptr; };
  options.cancelled = [&] { return finished >= 2; };
  const auto first = run_sweep(spec, options, registry);
  EXPECT_TRUE(first.interrupted);
  EXPECT_EQ(first.rows.size(), 2u);
  EXPECT_EQ(report::read_jsonl(dir / kRowsFile, nullptr).size(), 2u);
  EXPECT_TRUE(fs::exists(dir / kJsonFile));

  // Without --resume or --force the directory is refused.
  SweepOptions again;
  again.out_dir = dir;
  EXPECT_THROW(run_sweep(spec, again, registry), Error);

  const int calls_before = calls.load();
  SweepOptions resume;
  resume.out_dir = dir;
  resume.resume = true;
  const auto second = run_sweep(spec, resume, registry);
  EXPECT_FALSE(second.interrupted);
  EXPECT_EQ(second.resumed, 2u);
  EXPECT_EQ(second.rows.size(), total);
  // Each new case: one accuracy run + max 3 timed runs; the 2 finished cases were not rerun.
  EXPECT_LE(calls.load() - calls_before, 2 * 4);
  const auto rows = report::read_jsonl(dir / kRowsFile, nullptr);
  ASSERT_EQ(rows.size(), total);
  std::set<std::string> keys;
  for (const auto& r : rows) keys.insert(r.case_key());
  EXPECT_EQ(keys.size(), total);
  const auto json = nlohmann::json::parse(std::ifstream(dir / kJsonFile));
  EXPECT_EQ(json["rows"].size(), total);
  fs::remove_all(dir);
}

namespace attnsuite {
namespace {

// The generators' own log and sin/cos (bitwise reproducible on the GPU) against libm.
TEST(GeneratorMath, LogAndSinCosMatchLibm) {
  std::mt19937_64 rng(7);
  double worst_log = 0, worst_trig = 0;
  for (int i = 0; i < 200000; ++i) {
    const double u = bench::genmath::unit_open(rng());
    const double log_error = std::abs(bench::genmath::log_unit(u) - std::log(u)) / std::max(1.0, std::abs(std::log(u)));
    double s = 0, c = 0;
    bench::genmath::sincos_turn(u, &s, &c);
    const double angle = 2.0 * 3.14159265358979323846 * u;
    worst_log = std::max(worst_log, log_error);
    worst_trig = std::max({worst_trig, std::abs(s - std::sin(angle)), std::abs(c - std::cos(angle))});
  }
  // Tiny arguments exercise the exponent path of the log.
  for (double u : {1.0, 0.5, 1e-300, 4.9e-324 * 2, 0.7071067811865476, 0.7071067811865475}) {
    worst_log =
        std::max(worst_log, std::abs(bench::genmath::log_unit(u) - std::log(u)) / std::max(1.0, std::abs(std::log(u))));
  }
  EXPECT_LE(worst_log, 4e-16);
  EXPECT_LE(worst_trig, 2e-15);
}

// randn is standard normal, uniform is on [-1, 1): moments of a million draws.
TEST(GeneratorMath, DistributionsHaveTheirMoments) {
  AttentionProblem p;
  std::vector<float> q(1 << 20), k(1 << 20), v(1 << 20);
  bench::find_generator("randn").fill(p, 99, q, k, v);
  double sum = 0, sum_sq = 0, sum_4 = 0;
  for (float x : k) {
    sum += x;
    sum_sq += double(x) * x;
    sum_4 += double(x) * x * x * x;
  }
  const double n = static_cast<double>(k.size());
  EXPECT_NEAR(sum / n, 0.0, 5e-3);
  EXPECT_NEAR(sum_sq / n, 1.0, 5e-3);
  EXPECT_NEAR(sum_4 / n, 3.0, 3e-2);  // normal kurtosis
  bench::find_generator("uniform").fill(p, 99, q, k, v);
  double lo = 1, hi = -1, mean = 0;
  for (float x : v) {
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
    mean += x;
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_NEAR(mean / n, 0.0, 3e-3);
  EXPECT_NE(q[0], k[0]);  // the three tensors are different streams
}

}  // namespace
}  // namespace attnsuite
