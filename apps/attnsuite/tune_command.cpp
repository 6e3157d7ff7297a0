// `attnsuite tune --batch`: per backend and sequence length, the batch size of highest
// throughput under --max-memory-gib and --p95-ms, measured by the benchmark runner.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "attnsuite/error.hpp"
#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/profile.hpp"
#include "bench/runner.hpp"
#include "bench/sweep.hpp"
#include "commands.hpp"
#include "report/atomic_file.hpp"
#include "report/sinks.hpp"
#include "tune/backend_cache.hpp"
#include "tune/tune_run.hpp"

namespace attnsuite::cli {

namespace {

struct TuneFlags {
  bool batch = false, kernels = false;
  std::string suite;
  std::vector<std::string> backends, dtypes, models, causal;
  std::vector<int> seqs, heads, kv_heads, head_dims;
  std::optional<double> max_memory_gib, p95_ms;
  int min_batch = 1, max_batch = 1024;
  bool exhaustive = false;
  std::optional<int> min_reps, max_reps, warmup;
  std::optional<double> noise, max_time_ms, reference_gflop;
  bool hot = false;
  std::string out;
  bool force = false, quiet = false;
  std::string cache;
  bool no_cache = false;
};

nlohmann::json overrides_from(const TuneFlags& f) {
  nlohmann::json o = nlohmann::json::object();
  if (!f.backends.empty()) o["backends"] = f.backends;
  if (!f.dtypes.empty()) o["dtype"] = f.dtypes;
  if (!f.seqs.empty()) o["seq"] = f.seqs;
  if (!f.models.empty()) o["model"] = f.models;
  if (!f.heads.empty()) o["heads"] = f.heads;
  if (!f.kv_heads.empty()) o["kv_heads"] = f.kv_heads;
  if (!f.head_dims.empty()) o["head_dim"] = f.head_dims;
  if (!f.causal.empty()) o["causal"] = causal_values(f.causal);
  if (f.min_reps) o["timing"]["min_reps"] = *f.min_reps;
  if (f.max_reps) o["timing"]["max_reps"] = *f.max_reps;
  if (f.warmup) o["timing"]["warmup"] = *f.warmup;
  if (f.noise) o["timing"]["noise"] = *f.noise;
  if (f.max_time_ms) o["timing"]["max_time_ms"] = *f.max_time_ms;
  if (f.hot) o["timing"]["cold"] = false;
  return o;
}

std::string probe_line(const bench::ResultRow& r) {
  if (r.status == bench::CaseStatus::Ok && r.tokens_per_s && r.ms_p95)
    return fmt::format("batch {}: {} tokens/s, p95 {} ms, peak extra {} MiB", r.batch, report::format_si(*r.tokens_per_s),
                       report::format_ms(*r.ms_p95), report::format_ms(r.peak_mem_mib.value_or(0)));
  return fmt::format("batch {}: {}: {}", r.batch, bench::to_string(r.status), r.reason);
}

}  // namespace

Action add_tune(CLI::App& app) {
  auto f = std::make_shared<TuneFlags>();
  app.add_flag("--batch", f->batch, "Tune the batch size (the one tuner available)");
  app.add_flag("--kernels", f->kernels, "Kernel-config tuning (not available yet)");
  app.add_option("--suite", f->suite, "Suite whose cases to tune (default: headline with a GPU, else default)");
  app.add_option("-b,--backends", f->backends, "Backends (comma-separated)")->delimiter(',');
  app.add_option("--dtype", f->dtypes, "fp32, fp16, bf16")->delimiter(',');
  app.add_option("--seq", f->seqs, "Sequence lengths")->delimiter(',');
  app.add_option("--model", f->models, "Model presets for the head axes")->delimiter(',');
  app.add_option("--heads", f->heads, "Query heads")->delimiter(',');
  app.add_option("--kv-heads", f->kv_heads, "Key/value heads")->delimiter(',');
  app.add_option("--head-dim", f->head_dims, "Head dims")->delimiter(',');
  app.add_option("--causal", f->causal, "true, false or both")->delimiter(',');
  app.add_option("--max-memory-gib", f->max_memory_gib,
                 "Memory limit per case: inputs plus the peak extra memory (default: what the device has)");
  app.add_option("--p95-ms", f->p95_ms, "p95 latency target per forward (default: none)");
  app.add_option("--min-batch", f->min_batch, "Smallest batch to consider")->capture_default_str();
  app.add_option("--max-batch", f->max_batch, "Largest batch to consider")->capture_default_str();
  app.add_flag("--exhaustive", f->exhaustive, "Also sweep every batch, to check the search's answer");
  app.add_option("--noise", f->noise, "Stop repeating when the median's relative error is under this");
  app.add_option("--min-reps", f->min_reps, "Fewest measured repetitions per probe");
  app.add_option("--max-reps", f->max_reps, "Most measured repetitions per probe");
  app.add_option("--warmup", f->warmup, "Warm-up runs per probe");
  app.add_option("--max-time-ms", f->max_time_ms, "Time budget per probe for the measured repetitions");
  app.add_option("--reference-gflop", f->reference_gflop,
                 fmt::format("fp64 reference budget per probe (default {})", tune::kTuneReferenceGflop));
  app.add_flag("--hot", f->hot, "Keep caches warm between samples");
  app.add_option("-o,--out", f->out, "Output directory (default: results/tune-<suite>-<time>)");
  app.add_flag("--force", f->force, "Overwrite a tune.json already in --out");
  app.add_flag("-q,--quiet", f->quiet, "No progress output");
  app.add_option("--cache", f->cache,
                 "Backend cache to update with the fastest backends per shape class, which backend=\"auto\" "
                 "reads (default: " + tune::default_cache_path().string() + ")");
  app.add_flag("--no-cache", f->no_cache, "Do not update the backend cache");

  return [f]() -> int {
    if (f->kernels)
      throw Error(ErrorKind::Usage,
                  "tune --kernels is not available yet: our CUDA kernels expose no tunable configs; use tune --batch");
    if (!f->batch) throw Error(ErrorKind::Usage, "tune needs --batch (the batch-size tuner)");

    tune::TuneOptions options;
    options.limits.min_batch = f->min_batch;
    options.limits.max_batch = f->max_batch;
    if (f->max_memory_gib) options.limits.max_memory_bytes = *f->max_memory_gib * 1073741824.0;
    options.limits.max_p95_ms = f->p95_ms;
    options.limits.validate();
    options.exhaustive = f->exhaustive;
    options.reference_gflop = f->reference_gflop;
    options.out_dir = f->out;
    options.force = f->force;
    if (!f->no_cache) options.cache_path = f->cache.empty() ? tune::default_cache_path() : std::filesystem::path(f->cache);
    options.cancelled = interrupt_requested;
    if (!f->quiet) {
      options.on_case = [](const bench::ResultRow& c) {
        fmt::print(stderr, "tune {} {}\n", c.backend, report::shape_summary(c));
      };
      options.on_probe = [](const bench::ResultRow& r) { fmt::print(stderr, "  {}\n", probe_line(r)); };
      options.on_sweep = [] { fmt::print(stderr, "  exhaustive sweep\n"); };
    }

    if (f->suite.empty()) f->suite = default_suite_name();
    nlohmann::json suite_json = bench::load_suite_json(f->suite);
    if (const nlohmann::json overrides = overrides_from(*f); !overrides.empty())
      suite_json = bench::merge_suite(std::move(suite_json), overrides);
    const bench::SweepSpec spec = tune::tune_spec(suite_json, f->suite, options);

    install_interrupt_handlers();
    const tune::TuneOutcome outcome = tune::run_batch_tune(spec, options, Registry::global());
    for (const auto& warning : outcome.warnings) fmt::print(stderr, "attnsuite: warning: {}\n", warning);
    const std::size_t cases = outcome.document["tuning"].size();
    fmt::print("{}", outcome.table_terminal);
    fmt::print("\n{} {} tuned. Results in {}/ (tune.json: every probe's row and the tuning; tune.md)\n", cases,
               cases == 1 ? "case" : "cases", outcome.out_dir.string());
    if (outcome.cache_path)
      fmt::print("Backend cache {}: {} shape {} updated (backend=\"auto\" reads it)\n", outcome.cache_path->string(),
                 outcome.cache_classes, outcome.cache_classes == 1 ? "class" : "classes");
    const bool interrupted = outcome.interrupted, failed = outcome.failed;
    if (interrupted) {
      fmt::print(stderr, "attnsuite: interrupted; the cases tuned so far are saved\n");
      return kExitInterrupted;
    }
    return failed ? kExitFailed : kExitOk;
  };
}

}  // namespace attnsuite::cli
