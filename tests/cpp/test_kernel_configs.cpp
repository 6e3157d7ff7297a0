// The kernel-config cache and `tune --kernels` (tune/kernel_tuner.hpp), on the CPU backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "attnsuite/attnsuite.hpp"
#include "bench/plan.hpp"
#include "bench/runner.hpp"
#include "cli_test_support.hpp"
#include "core/isa.hpp"
#include "fake_backend_support.hpp"
#include "tune/kernel_tuner.hpp"

namespace attnsuite {
namespace {

using testing_support::run_cli;
using testing_support::scratch;
using testing_support::slurp;

AttentionProblem problem(int batch, int heads, int seq_q, int seq_kv, int head_dim, bool causal) {
  AttentionProblem p;
  p.batch = batch;
  p.heads_q = p.heads_kv = heads;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.head_dim = head_dim;
  p.causal = causal;
  p.dtype = DType::BF16;
  return p;
}

TEST(KernelConfigs, ShapeClassBucketsByPowersOfTwo) {
  EXPECT_EQ(kernel_shape_class(problem(2, 16, 4096, 4096, 128, true)), "bf16 d128 causal q4k kv4k bh32");
  // Nearby shapes share a class; a doubled one does not.
  EXPECT_EQ(kernel_shape_class(problem(2, 16, 3000, 3000, 128, true)),
            kernel_shape_class(problem(1, 32, 4096, 4096, 128, true)));
  EXPECT_NE(kernel_shape_class(problem(2, 16, 4097, 4097, 128, true)),
            kernel_shape_class(problem(2, 16, 4096, 4096, 128, true)));
  EXPECT_EQ(kernel_shape_class(problem(1, 1, 1, 300, 64, false)), "bf16 d64 dense q1 kv512 bh1");
  AttentionProblem window = problem(1, 8, 1000, 1000, 64, false);
  window.window_left = 100;
  EXPECT_EQ(kernel_shape_class(window), "bf16 d64 dense-window q1k kv1k bh8");
}

TEST(KernelConfigs, CacheRoundTripsAndLooksUpByEveryKeyField) {
  KernelConfigCache cache;
  const KernelConfigKey key{"NVIDIA H200", "580.159.04", "flash2", "bf16 d128 causal q4k kv4k bh32"};
  cache.set(key, {"m64", {{"ms_median", {{"default", 1.0}, {"m64", 0.9}}}}});
  const KernelConfigCache back = KernelConfigCache::from_json(nlohmann::json::parse(cache.to_json().dump()), "test");
  ASSERT_EQ(back.lookup(key), std::optional<std::string>("m64"));
  for (int field = 0; field < 4; ++field) {
    KernelConfigKey other = key;
    (field == 0 ? other.device : field == 1 ? other.driver : field == 2 ? other.backend : other.shape_class) += "x";
    EXPECT_FALSE(back.lookup(other)) << "field " << field;
  }
}

TEST(KernelConfigs, InvalidCacheFilesAreUsageErrorsNamingTheProblem) {
  const auto expect_error = [](const std::string& text, const std::string& needle) {
    const std::filesystem::path path = scratch("kcache") / "cache.json";
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
    try {
      (void)KernelConfigCache::load(path);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Usage);
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
    std::filesystem::remove_all(path.parent_path());
  };
  expect_error("{not json", "not valid JSON");
  expect_error("[]", "not an attnsuite kernel-config file");
  expect_error(R"({"format": "attnsuite-kernel-configs", "version": 7, "entries": []})", "version 7 not supported");
  expect_error(R"({"format": "attnsuite-kernel-configs", "version": 1, "entries": {}})", "'entries' must be an array");
  expect_error(R"({"format": "attnsuite-kernel-configs", "version": 1, "entries": [{"device": "x"}]})",
               "entry 0 has no string 'driver'");
  expect_error(std::string(200, '[') + std::string(200, ']'), "nested deeper");
  // A missing file is an empty cache.
  EXPECT_EQ(KernelConfigCache::load(scratch("kcache-missing") / "none.json").size(), 0u);
}

bench::SweepSpec spec_for(const std::string& backend) {
  bench::SweepSpec spec;
  spec.backends = {backend};
  spec.dtypes = {DType::F32};
  spec.batches = {1};
  spec.seq_q = {200};
  spec.heads = {{2, 2, 64, ""}};
  spec.timing.cold = false;
  spec.timing.measure.warmup_reps = 1;
  spec.timing.measure.min_reps = 5;
  spec.timing.measure.max_reps = 20;
  spec.reference_gflop = 0.01;
  return spec;
}

TEST(KernelTuner, TriesEveryConfigurationOfCpuFlashAndPicksOneThatRan) {
  const bench::SweepSpec spec = spec_for("cpu-flash");
  Registry& registry = Registry::global();
  bench::Runner runner(spec, registry);
  const bench::Case c = bench::expand(spec).front();
  int rows = 0;
  const tune::KernelTuneResult result =
      tune::tune_kernel_case(runner, registry, c, {}, [&](const std::string&, const bench::ResultRow&) { ++rows; });
  const std::vector<std::string> configs = registry.find("cpu-flash").kernel_configs(c.problem);
  ASSERT_EQ(result.candidates.size(), configs.size());
  EXPECT_EQ(rows, static_cast<int>(configs.size()));
  for (std::size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(result.candidates[i].config, configs[i]);
    // The backend ran what was forced, and says with which vector ISA.
    EXPECT_EQ(result.candidates[i].row.kernel_config,
              configs[i] + "/" + std::string(cpu::to_string(cpu::selected_cpu_isa())));
    EXPECT_EQ(result.candidates[i].row.status, bench::CaseStatus::Ok) << result.candidates[i].row.reason;
  }
  ASSERT_FALSE(result.best.empty()) << result.not_tuned;
  EXPECT_GE(result.speedup, 1.0);
  EXPECT_EQ(result.key.backend, "cpu-flash");
  EXPECT_EQ(result.key.shape_class, kernel_shape_class(c.problem));
}

TEST(KernelTuner, ABackendWithoutConfigurationsIsNotTuned) {
  const bench::SweepSpec spec = spec_for("cpu-vanilla");
  bench::Runner runner(spec, Registry::global());
  const tune::KernelTuneResult result =
      tune::tune_kernel_case(runner, Registry::global(), bench::expand(spec).front(), {});
  EXPECT_TRUE(result.candidates.empty());
  EXPECT_NE(result.not_tuned.find("no kernel configurations"), std::string::npos) << result.not_tuned;
}

// A backend with four kernel configs, all on the CPU: "default" the fp64 reference after a 30 ms
// wait (about 10x the others, whatever the machine's load); "fast-wrong" O × 1.5 at once; "fast-bad-lse" the right O
// and LSE + 1 at once; "fast-right" the reference at once. The tuner may choose only the last.
class ConfigurableFake final : public Backend {
 public:
  std::string_view name() const override { return "fake-configs"; }
  std::string_view display_name() const override { return "fake-configs"; }
  Device device() const override { return {}; }
  std::string capabilities() const override { return "test"; }
  Support supports(const AttentionProblem&) const override { return Support::yes(); }
  std::vector<std::string> kernel_configs(const AttentionProblem&) const override {
    return {"default", "fast-wrong", "fast-bad-lse", "fast-right"};
  }
  std::unique_ptr<KernelPlan> plan(const AttentionProblem& p, const PlanOptions& options) const override {
    const std::string config = options.kernel_config.empty() ? "default" : options.kernel_config;
    return std::make_unique<FunctionPlan>(config, 0, [p, config](const AttentionArgs& args, Stream, RunReport&) {
      if (config == "default") std::this_thread::sleep_for(std::chrono::milliseconds(30));
      testing_support::write_reference_output(p, args, config == "fast-wrong" ? 1.5 : 1.0,
                                              config == "fast-bad-lse" ? 1.0 : 0.0);
    });
  }
};

// The tuner chooses only a configuration as accurate as the built-in one: rel-L2 at most twice
// the built-in's plus 1e-4 (accurate_as), the LSE right where the built-in's is; the excluded
// candidates say why in the tuning's JSON.
TEST(KernelTuner, ALessAccurateConfigurationIsNeverChosen) {
  bench::ResultRow reference, candidate;
  reference.rel_l2 = 2.0e-3;
  candidate.rel_l2 = 4.0e-3;
  EXPECT_TRUE(tune::accurate_as(candidate, reference));
  candidate.rel_l2 = 4.2e-3;
  EXPECT_FALSE(tune::accurate_as(candidate, reference));
  candidate.rel_l2.reset();  // not measured: no judgement
  EXPECT_TRUE(tune::accurate_as(candidate, reference));

  Registry registry;
  registry.add("fake-configs", [] { return std::make_unique<ConfigurableFake>(); });
  bench::SweepSpec spec = spec_for("fake-configs");
  spec.timing.measure.max_reps = 10;
  bench::Runner runner(spec, registry);
  const tune::KernelTuneResult result = tune::tune_kernel_case(runner, registry, bench::expand(spec).front(), {});
  ASSERT_EQ(result.candidates.size(), 4u);
  EXPECT_EQ(result.best, "fast-right") << result.not_tuned;
  EXPECT_GT(result.speedup, 1.0);
  EXPECT_TRUE(result.candidates[0].excluded.empty());
  EXPECT_NE(result.candidates[1].excluded.find("less accurate than the built-in default: rel-L2"), std::string::npos)
      << result.candidates[1].excluded;
  EXPECT_NE(result.candidates[2].excluded.find("log-sum-exp differs from the reference"), std::string::npos)
      << result.candidates[2].excluded << " / " << result.candidates[2].row.reason;
  EXPECT_TRUE(result.candidates[3].excluded.empty());
  const nlohmann::ordered_json json = tune::to_json(result);
  EXPECT_FALSE(json["candidates"][0].contains("excluded"));
  EXPECT_EQ(json["candidates"][1]["excluded"], result.candidates[1].excluded);
}

TEST(KernelTuner, TheDefaultStaysUnlessAnotherIsFasterBeyondTheNoise) {
  bench::ResultRow reference, candidate;
  reference.ms_median = 1.0;
  reference.ms_stddev = 0.01;
  reference.reps = 100;
  candidate = reference;
  candidate.ms_median = 0.995;  // 0.5% faster: under the 1% floor
  EXPECT_FALSE(tune::faster_beyond_noise(candidate, reference));
  candidate.ms_median = 0.95;
  EXPECT_TRUE(tune::faster_beyond_noise(candidate, reference));
  candidate.ms_stddev = 0.5;  // noisy: 2·σ/√n ≈ 10% > 5%
  candidate.reps = 100;
  EXPECT_FALSE(tune::faster_beyond_noise(candidate, reference));
}

// The CLI end to end: tune --kernels writes the cache, and a bench run afterwards reports the
// cached configuration in its rows (the backend read the cache).
TEST(KernelTunerCli, WritesTheCacheThatBenchThenUses) {
  const std::filesystem::path dir = scratch("tune_kernels");
  std::filesystem::create_directories(dir);
  const std::string cache = (dir / "cache" / "kernel-configs.json").string();
  const std::vector<std::string> axes = {"--backends", "cpu-flash", "--dtype",    "fp32", "--seq",    "96",
                                         "--heads",    "2",         "--head-dim", "64",   "--causal", "false"};
  std::vector<std::string> args = {"tune",           "--kernels", "--suite", "default",
                                   "--kernel-cache", cache,       "--out",   (dir / "tune").string(),
                                   "--max-time-ms",  "50",        "-q"};
  args.insert(args.end(), axes.begin(), axes.end());
  const auto tuned = run_cli(args);
  ASSERT_EQ(tuned.code, 0) << tuned.err << tuned.out;
  EXPECT_NE(tuned.out.find("cases tuned; kernel-config cache: " + cache), std::string::npos) << tuned.out;
  const KernelConfigCache written = KernelConfigCache::load(cache);
  ASSERT_GE(written.size(), 1u);
  const nlohmann::json entries = nlohmann::json::parse(slurp(cache))["entries"];
  const std::string chosen = entries[0]["config"];
  EXPECT_EQ(entries[0]["backend"], "cpu-flash");
  // Which configuration wins depends on the machine (and on a sanitizer build's timing); it is
  // one of cpu-flash's, and the table names it (tune.md; -q prints no table).
  const std::vector<std::string> configs = Registry::global().find("cpu-flash").kernel_configs(AttentionProblem{});
  EXPECT_NE(std::find(configs.begin(), configs.end(), chosen), configs.end()) << chosen;
  EXPECT_NE(slurp(dir / "tune" / "tune.md").find(chosen), std::string::npos);
  EXPECT_EQ(tuned.out.find("│"), std::string::npos) << tuned.out;

  std::vector<std::string> bench = {"bench",   "--suite", "default",       "--out", (dir / "bench").string(),
                                    "--batch", "1",       "--max-time-ms", "20",    "-q"};
  bench.insert(bench.end(), axes.begin(), axes.end());
  const auto ran = run_cli(bench, {"ATTNSUITE_KERNEL_CACHE=" + cache});
  ASSERT_EQ(ran.code, 0) << ran.err;
  const nlohmann::json results = nlohmann::json::parse(slurp(dir / "bench" / "results.json"));
  bool found = false;
  for (const auto& row : results["rows"]) {
    if (row["backend"] != "cpu-flash") continue;
    found = true;
    EXPECT_EQ(row["kernel_config"], chosen + "/" + std::string(cpu::to_string(cpu::selected_cpu_isa()))) << row.dump();
  }
  EXPECT_TRUE(found);

  // A broken cache file is refused by tune (not overwritten) and only warned about by bench.
  std::ofstream(cache) << "{broken";
  const auto refused = run_cli(args);
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_NE(refused.err.find("not valid JSON"), std::string::npos) << refused.err;
  EXPECT_EQ(slurp(cache), "{broken");
  bench.push_back("--force");
  const auto warned = run_cli(bench, {"ATTNSUITE_KERNEL_CACHE=" + cache});
  EXPECT_EQ(warned.code, 0) << warned.err;
  EXPECT_NE(warned.err.find("warning"), std::string::npos) << warned.err;
  std::filesystem::remove_all(dir);
}

// The input generator changes accuracy, not speed: cases that differ only in it are tuned once,
// and --generator replaces the suite's generators (as it does for bench).
TEST(KernelTunerCli, TunesAShapeOnceWhateverItsGenerators) {
  const std::filesystem::path dir = scratch("tune_kernels_generators");
  std::filesystem::create_directories(dir);
  const std::string cache = (dir / "kernel-configs.json").string();
  const std::string suite = (dir / "suite.json").string();
  std::ofstream(suite) << R"({"name": "t", "backends": ["cpu-flash"], "dtype": "fp32", "batch": [1], "seq": [64, 96],
                              "heads": [2], "head_dim": [64], "causal": [false], "generator": ["randn", "uniform"]})";
  const auto tune = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"tune",           "--kernels",     "--suite", suite,
                                     "--kernel-cache", cache,           "--out",   (dir / "tune").string(),
                                     "--force",        "--max-time-ms", "20",      "-q"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const auto both = tune({});
  ASSERT_EQ(both.code, 0) << both.err << both.out;
  const nlohmann::json result = nlohmann::json::parse(slurp(dir / "tune" / "tune.json"));
  ASSERT_EQ(result["kernel_tuning"].size(), 2u)
      << "two shapes (N 64, 96), each once: " << result["kernel_tuning"].dump();
  std::set<std::string> generators;
  for (const auto& row : result["rows"]) generators.insert(row["generator"].get<std::string>());
  EXPECT_EQ(generators, std::set<std::string>{"randn"}) << "the first generator's inputs";
  const auto other = tune({"--generator", "uniform"});
  ASSERT_EQ(other.code, 0) << other.err;
  const nlohmann::json again = nlohmann::json::parse(slurp(dir / "tune" / "tune.json"));
  EXPECT_EQ(again["kernel_tuning"].size(), 2u);
  for (const auto& row : again["rows"]) EXPECT_EQ(row["generator"], "uniform");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnsuite

namespace attnsuite {
namespace {

// A suite's kernel_config (bench --kernel-config) reaches the cases of the backends it names only.
TEST(KernelConfigs, SuiteKernelConfigGoesToItsBackendsCases) {
  const auto spec = bench::parse_suite(
      nlohmann::json::parse(R"({"backends": ["cpu-flash", "cpu-vanilla"], "kernel_config": {"cpu-flash": "q96-k96"}})"),
      "t");
  int flash = 0, vanilla = 0;
  for (const bench::Case& c : bench::expand(spec)) {
    if (c.backend == "cpu-flash") {
      EXPECT_EQ(c.kernel_config, "q96-k96");
      ++flash;
    } else {
      EXPECT_EQ(c.kernel_config, "");
      ++vanilla;
    }
  }
  EXPECT_GT(flash, 0);
  EXPECT_GT(vanilla, 0);
  const auto refused = [](const char* text) {
    try {
      bench::parse_suite(nlohmann::json::parse(text), "t");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused(R"({"backends": ["cpu-flash"], "kernel_config": {"flash9": "q96-k96"}})")
                .find("'kernel_config.flash9' names a backend this sweep does not run; allowed: cpu-flash"),
            std::string::npos);
  EXPECT_NE(
      refused(R"({"backends": ["cpu-flash"], "kernel_config": {"cpu-flash": 3}})").find("kernel_config.cpu-flash"),
      std::string::npos);
  EXPECT_NE(refused(R"({"backends": ["cpu-flash"], "kernel_config": "q96-k96"})").find("must be an object"),
            std::string::npos);
}

TEST(KernelConfigsCli, BenchRunsTheConfigItIsGivenAndRefusesAWrongOne) {
  const std::filesystem::path dir = scratch("bench_kernel_config");
  std::filesystem::remove_all(dir);
  const auto bench = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"bench", "--backends", "cpu-flash", "--dtype",
                                     "fp32",  "--seq",      "96",        "--heads",
                                     "2",     "--head-dim", "64",        "--batch",
                                     "1",     "--causal",   "false",     "--max-time-ms",
                                     "20",    "-q",         "--out",     (dir / name).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args, {"ATTNSUITE_KERNEL_CACHE=off"});
  };
  const auto rows = [&](const std::string& name) {
    return nlohmann::json::parse(slurp(dir / name / "results.json"))["rows"];
  };
  const auto ran = bench("given", {"--kernel-config", "cpu-flash=q96-k96"});
  ASSERT_EQ(ran.code, 0) << ran.err;
  ASSERT_FALSE(rows("given").empty());
  for (const auto& row : rows("given"))
    EXPECT_EQ(row["kernel_config"], "q96-k96/" + std::string(cpu::to_string(cpu::selected_cpu_isa()))) << row.dump();

  // A name the backend does not have: the case fails, saying which names it has.
  const auto wrong = bench("wrong", {"--kernel-config", "cpu-flash=q7-k7"});
  EXPECT_EQ(wrong.code, 1) << wrong.err;
  for (const auto& row : rows("wrong")) {
    EXPECT_EQ(row["status"], "failed") << row.dump();
    EXPECT_NE(row["reason"].get<std::string>().find("kernel config 'q7-k7' unknown for this problem; allowed: q"),
              std::string::npos)
        << row.dump();
  }
  // A backend the sweep does not run, and a value without BACKEND=: usage errors, nothing written.
  const auto other = bench("other", {"--kernel-config", "flash9=q96-k96"});
  EXPECT_EQ(other.code, 2) << other.err;
  EXPECT_NE(other.err.find("kernel_config.flash9"), std::string::npos) << other.err;
  const auto bare = bench("bare", {"--kernel-config", "q96-k96"});
  EXPECT_EQ(bare.code, 2) << bare.err;
  EXPECT_NE(bare.err.find("--kernel-config q96-k96 is not allowed: the form is BACKEND=CONFIG"), std::string::npos)
      << bare.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "other" / "results.json"));
  const auto option = bench("option", {"--backend-option", "nothing"});
  EXPECT_EQ(option.code, 2) << option.err;
  EXPECT_NE(option.err.find("the form is KEY=VALUE"), std::string::npos) << option.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnsuite
