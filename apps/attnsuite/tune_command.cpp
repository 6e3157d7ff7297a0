// `attnsuite tune --batch`: per backend and sequence length, the batch size of highest
// throughput under --max-memory-gib and --p95-ms, measured by the benchmark runner.
// `attnsuite tune --kernels`: per case, the fastest kernel configuration of each backend that
// has a choice, written to the kernel-config cache (tune/kernel_tuner.hpp).
// `attnsuite tune --sparse`: the sparse predictor's settings per head (tune/sparse_tuner.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>

#include "attnsuite/error.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/profile.hpp"
#include "bench/runner.hpp"
#include "commands.hpp"
#include "core/atomic_file.hpp"
#include "report/sinks.hpp"
#include "report/sweep.hpp"
#include "tune/backend_cache.hpp"
#include "tune/kernel_tuner.hpp"
#include "tune/sparse_tuner.hpp"
#include "tune/tune_run.hpp"

namespace attnsuite::cli {

namespace {

struct TuneFlags {
  bool batch = false, kernels = false, sparse = false;
  // --sparse
  std::optional<double> target, target_cos, target_rmse;
  double margin = 0.6, min_sparsity = 0.1;
  int calibration = 2, batch_size = 1;
  std::vector<std::string> generators;
  std::string dense_backend, sparse_out;
  std::optional<std::int64_t> seed;
  std::string suite;
  std::vector<std::string> backends, dtypes, models, causal, passes;
  std::vector<int> seqs, heads, kv_heads, head_dims;
  std::optional<double> max_memory_gib, p95_ms;
  int min_batch = 1, max_batch = 1024;
  double tolerance = 0;
  double flat_gain = tune::BatchLimits::kDefaultFlatGain;
  double time_budget_s = tune::BatchLimits::kDefaultTimeBudgetS;
  bool exhaustive = false;
  std::optional<int> min_reps, max_reps, warmup;
  std::optional<double> noise, max_time_ms, reference_gflop;
  bool hot = false;
  std::string out;
  bool force = false, quiet = false;
  std::string cache;
  bool no_cache = false;
  std::string kernel_cache;
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
  if (!f.passes.empty()) o["pass"] = f.passes;
  if (!f.generators.empty() && !f.sparse) o["generator"] = f.generators;
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
    return fmt::format("batch {}: {} tokens/s, p95 {} ms, peak extra {} MiB", r.batch,
                       report::format_si(*r.tokens_per_s), report::format_ms(*r.ms_p95),
                       report::format_ms(r.peak_mem_mib.value_or(0)));
  return fmt::format("batch {}: {}: {}", r.batch, bench::to_string(r.status), r.reason);
}

// tune --kernels: every case of the suite (its batches as given), each configuration forced in
// turn; the winners are merged into the kernel-config cache file (atomically) and the global
// cache, so the rest of this process uses them too. Cases that differ only in their input
// generator are tuned once (the first generator's inputs): the generator changes a kernel's
// accuracy, not its speed — the sage suite's four generators made the H200 run of 2026-12-04
// tune every shape four times.
int tune_kernels(TuneFlags& f) {
  const std::filesystem::path cache_path =
      f.kernel_cache.empty() ? KernelConfigCache::default_path() : std::filesystem::path(f.kernel_cache);
  if (cache_path.empty())
    throw Error(
        ErrorKind::Usage,
        "tune --kernels: the kernel-config cache is off (ATTNSUITE_KERNEL_CACHE=off); pass --kernel-cache FILE");
  // Read (and validate) the existing cache before measuring anything: a broken file is an error
  // here, not something to overwrite.
  KernelConfigCache cache = KernelConfigCache::load(cache_path);

  if (f.suite.empty()) f.suite = default_suite_name();
  nlohmann::json suite_json = bench::load_suite_json(f.suite);
  if (const nlohmann::json overrides = overrides_from(f); !overrides.empty())
    suite_json = bench::merge_suite(std::move(suite_json), overrides);
  bench::SweepSpec spec = bench::parse_suite(suite_json, f.suite);
  spec.reference_gflop = f.reference_gflop.value_or(std::min(spec.reference_gflop, tune::kTuneReferenceGflop));
  Registry& registry = Registry::global();
  for (const auto& name : spec.backends) (void)registry.find(name);

  const std::filesystem::path out_dir =
      f.out.empty() ? tune::default_out_dir("tune-kernels-" + spec.name) : std::filesystem::path(f.out);
  const std::filesystem::path json_path = out_dir / "tune.json";
  if (std::filesystem::exists(json_path) && !f.force)
    throw Error(ErrorKind::Usage, fmt::format("'{}' already exists; use --force to overwrite it", json_path.string()));
  report::ensure_writable_directory(out_dir);

  install_interrupt_handlers();
  std::vector<std::string> warnings;
  bench::RunHeader header = bench::make_run_header(spec, registry, &warnings);
  header.suite = "tune --kernels: " + spec.name;
  header.settings["tune"] = {{"kernels", true}, {"kernel_cache", cache_path.string()}};
  for (const auto& warning : warnings) fmt::print(stderr, "attnsuite: warning: {}\n", warning);

  bench::Runner runner(spec, registry);
  std::vector<bench::ResultRow> rows;
  nlohmann::ordered_json tuning = nlohmann::ordered_json::array();
  bool interrupted = false;
  int tuned = 0;
  std::set<std::string> seen;  // backend | problem: the cases tuned already
  for (const bench::Case& c : bench::expand(spec)) {
    if (interrupted) break;
    if (!seen.insert(c.backend + " | " + c.problem.describe()).second) continue;
    if (!f.quiet) fmt::print(stderr, "tune --kernels {} {}\n", c.backend, c.problem.describe());
    tune::KernelTuneResult result = tune::tune_kernel_case(
        runner, registry, c, interrupt_requested, [&](const std::string& config, const bench::ResultRow& r) {
          if (f.quiet) return;
          if (r.status == bench::CaseStatus::Ok && r.ms_median)
            fmt::print(stderr, "  {}: {} ms\n", config, report::format_ms(*r.ms_median));
          else
            fmt::print(stderr, "  {}: {}: {}\n", config, bench::to_string(r.status), r.reason);
        });
    interrupted = result.interrupted;
    for (tune::KernelCandidate& candidate : result.candidates) {
      bench::apply_profile(candidate.row, header.ceilings);
      rows.push_back(candidate.row);
    }
    if (!result.best.empty()) {
      nlohmann::json measured = nlohmann::json::object();
      for (const tune::KernelCandidate& candidate : result.candidates)
        if (candidate.row.ms_median) measured["ms_median"][candidate.config] = *candidate.row.ms_median;
      measured["case"] = c.problem.describe();
      measured["at"] = bench::utc_now_iso8601();
      cache.set(result.key, {result.best, std::move(measured)});
      ++tuned;
    }
    tuning.push_back(tune::to_json(result));
  }
  header.finished_at = bench::utc_now_iso8601();
  header.interrupted = interrupted;

  // Merged into the file as it is now: another tune may have written it meanwhile.
  KernelConfigCache merged = KernelConfigCache::load(cache_path);
  const nlohmann::ordered_json ours = cache.to_json();
  for (const auto& entry : ours["entries"])
    merged.set({entry["device"].get<std::string>(), entry["driver"].get<std::string>(),
                entry["backend"].get<std::string>(), entry["shape_class"].get<std::string>()},
               {entry["config"].get<std::string>(), nlohmann::json(entry["measured"])});
  if (tuned > 0) {
    report::ensure_writable_directory(cache_path.parent_path().empty() ? "." : cache_path.parent_path());
    report::write_file_atomic(cache_path, merged.to_json().dump(2) + "\n");
    KernelConfigCache::global().assign(merged);
  }

  nlohmann::ordered_json document = nlohmann::ordered_json::parse(report::results_json_text(header, rows));
  document["kernel_tuning"] = tuning;
  report::write_file_atomic(json_path, document.dump(2) + "\n");
  const report::TextTable table = tune::kernel_tuning_table(nlohmann::json(tuning));
  report::write_file_atomic(out_dir / "tune.md", table.markdown());
  if (!f.quiet) fmt::print("{}\n", table.terminal());
  fmt::print("{} of {} {} tuned; kernel-config cache: {} ({} entries). Results in {}/\n", tuned, tuning.size(),
             tuning.size() == 1 ? "case" : "cases", cache_path.string(), merged.size(), out_dir.string());
  if (interrupted) fmt::print(stderr, "attnsuite: interrupted; the cases tuned so far are saved\n");
  const bool failed = std::any_of(rows.begin(), rows.end(),
                                  [](const bench::ResultRow& r) { return r.status == bench::CaseStatus::Failed; });
  if (tuned == 0 && !interrupted && !failed)
    fmt::print(stderr, "attnsuite: nothing tuned: no case has a kernel configuration to choose that runs here\n");
  return run_exit_code(interrupted, failed, tuned == 0);
}

// `tune --sparse`: one layer per generator, every q head tuned at once (tune/sparse_tuner.hpp),
// then a check on a held-out input; writes the config that --sparse-config reads.
int run_sparse_tune(const TuneFlags& f) {
  tune::SparseTarget target;
  const int targets = (f.target ? 1 : 0) + (f.target_cos ? 1 : 0) + (f.target_rmse ? 1 : 0);
  if (targets > 1) throw Error(ErrorKind::Usage, "give one of --target, --target-cos, --target-rmse");
  if (f.target_cos) {
    target.metric = tune::SparseMetric::Cosine;
    target.value = *f.target_cos;
  } else if (f.target_rmse) {
    target.metric = tune::SparseMetric::Rmse;
    target.value = *f.target_rmse;
  } else if (f.target) {
    target.value = *f.target;
  }
  target.margin = f.margin;
  target.min_sparsity = f.min_sparsity;
  target.validate();
  if (f.backends.size() != 1)
    throw Error(ErrorKind::Usage,
                "tune --sparse needs one backend: -b sparge or sparge-sage (GPU), or -b cpu-sparge (CPU)");
  const std::string& backend = f.backends.front();
  Registry& registry = Registry::global();
  const Device device = registry.find(backend).device();
  const std::string dense = !f.dense_backend.empty()         ? f.dense_backend
                            : device.type == DeviceType::Cpu ? "cpu-flash"
                                                             : "flash2";
  AttentionProblem problem;
  problem.batch = f.batch_size;
  problem.seq_q = problem.seq_kv = f.seqs.empty() ? 4096 : f.seqs.front();
  problem.heads_q = f.heads.empty() ? 32 : f.heads.front();
  problem.heads_kv = f.kv_heads.empty() ? problem.heads_q : f.kv_heads.front();
  problem.head_dim = f.head_dims.empty() ? 128 : f.head_dims.front();
  problem.dtype = DType::BF16;
  if (!f.dtypes.empty()) {
    const auto dtype = parse_dtype(f.dtypes.front());
    if (!dtype)
      throw Error(ErrorKind::Usage,
                  fmt::format("--dtype '{}' is not a dtype; allowed: {}", f.dtypes.front(), kAllowedDTypes));
    problem.dtype = *dtype;
  }
  if (!f.causal.empty()) {
    const nlohmann::json causal = causal_values(f.causal);
    problem.causal = causal.is_array() ? causal.front().get<bool>() : causal.get<bool>();
  }
  problem.validate();
  const std::vector<std::string> generators = f.generators.empty() ? std::vector<std::string>{"banded"} : f.generators;
  const std::uint64_t seed = static_cast<std::uint64_t>(f.seed.value_or(0));
  if (f.seed && *f.seed < 0)
    throw Error(ErrorKind::Usage, fmt::format("--seed {} out of range; allowed: 0 or more", *f.seed));

  std::filesystem::path out_path = f.sparse_out;
  if (out_path.empty()) {
    const std::filesystem::path out_dir =
        f.out.empty() ? tune::default_out_dir("tune-sparse") : std::filesystem::path(f.out);
    out_path = out_dir / "sparse-config.json";
  }
  if (std::filesystem::exists(out_path) && !f.force)
    throw Error(ErrorKind::Usage, fmt::format("'{}' already exists; use --force to overwrite it", out_path.string()));
  if (out_path.has_parent_path()) report::ensure_writable_directory(out_path.parent_path());

  nlohmann::ordered_json document;
  document["format"] = "attnsuite-sparse-config";
  document["version"] = 1;
  document["sink"] = true;
  document["backend"] = backend;
  document["dense_backend"] = dense;
  document["block"] = {{"m", sparse::block_shape_for(problem.head_dim).m},
                       {"n", sparse::block_shape_for(problem.head_dim).n}};
  document["created_at"] = bench::utc_now_iso8601();
  nlohmann::json layers = nlohmann::json::array();
  bool failed = false;
  {
    // One layer, calibrated on `calibration` inputs of every generator given (a config that
    // serves all of them, as one model layer serves every prompt).
    const std::string name = fmt::format("{}", fmt::join(generators, "+"));
    const auto started = std::chrono::steady_clock::now();
    tune::BackendLayerEvaluator evaluate(problem, backend, dense, generators, seed, f.calibration);
    if (!f.quiet) fmt::print(stderr, "tune --sparse {} {} layer '{}'\n", backend, problem.describe(), name);
    const tune::SparseTuneResult result = tune::tune_sparse_layer(std::ref(evaluate), problem.heads_q, target);
    const double total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    nlohmann::json layer = tune::layer_json(name, problem, result, target);
    layer["seconds_with_inputs"] = total_seconds;
    // Held out: the next seed of each generator, which the search never saw, through the kernel
    // that will run (the search evaluated the exact selection: sparse_tuner.hpp).
    const std::uint64_t held_seed = seed + static_cast<std::uint64_t>(f.calibration);
    tune::BackendLayerEvaluator held_out(problem, backend, dense, generators, held_seed, 1, /*exact_selection=*/false);
    const std::vector<tune::HeadOutcome> check = held_out(result.config);
    double worst = 0, sparsity = 0;
    int dense_heads = 0;
    for (std::size_t h = 0; h < check.size(); ++h) {
      worst = std::max(worst, check[h].error(target.metric));
      sparsity += check[h].predicted_sparsity / static_cast<double>(check.size());
      dense_heads += result.config.heads[h].dense ? 1 : 0;
    }
    const double allowed = target.allowed_error();
    layer["held_out"] = {{"seed", held_seed},
                         {"worst_error", worst},
                         {"min_predicted_sparsity_mean", sparsity},
                         {"meets_target", worst <= allowed},
                         {"kernel", held_out.kernel_config()}};
    failed = worst > allowed;
    fmt::print(
        "{}: {} heads ({} dense), predicted sparsity {:.1f}% (held out, mean over heads of the least sparse "
        "input), worst {} {:.4f} (allowed {:.4f}){}; {} evaluations in {:.2f} s ({:.2f} s with the calibration inputs "
        "and the dense outputs)\n",
        name, problem.heads_q, dense_heads, sparsity * 100,
        target.metric == tune::SparseMetric::Cosine ? "1 − cos"
        : target.metric == tune::SparseMetric::Rmse ? "RMSE"
                                                    : "rel L1",
        worst, allowed, worst <= allowed ? "" : " — ABOVE TARGET", result.evaluations, result.seconds, total_seconds);
    layers.push_back(layer);
  }
  document["layers"] = layers;
  report::write_file_atomic(out_path, document.dump(2) + "\n");
  fmt::print("sparse config written to {} (bench --sparse-config {})\n", out_path.string(), out_path.string());
  return failed ? kExitFailed : kExitOk;
}

}  // namespace

Action add_tune(CLI::App& app) {
  auto f = std::make_shared<TuneFlags>();
  app.add_flag("--batch", f->batch, "Tune the batch size");
  app.add_flag("--kernels", f->kernels,
               "Tune the kernel configuration (tile sizes) of each backend that has a choice, per case; "
               "the winners go to the kernel-config cache");
  app.add_option("--kernel-cache", f->kernel_cache,
                 "Kernel-config cache file that --kernels updates (default: $ATTNSUITE_KERNEL_CACHE, else "
                 "$XDG_CACHE_HOME/attnsuite/kernel-configs.json or ~/.cache/attnsuite/kernel-configs.json)");
  app.add_flag(
      "--sparse", f->sparse,
      "Tune the sparse predictor per head to an error target (-b sparge|sparge-sage|cpu-sparge; writes --sparse-out)");
  app.add_option("--target", f->target, "--sparse: relative L1 against the dense output at most this (default 0.05)");
  app.add_option("--target-cos", f->target_cos, "--sparse: cosine similarity at least this instead");
  app.add_option("--target-rmse", f->target_rmse, "--sparse: RMSE at most this instead");
  app.add_option("--margin", f->margin, "--sparse: share of the error budget for the block search (rest: P·V skip)")
      ->capture_default_str();
  app.add_option("--min-sparsity", f->min_sparsity, "--sparse: heads below this predicted sparsity fall back to dense")
      ->capture_default_str();
  app.add_option("--calibration", f->calibration, "--sparse: calibration inputs per layer (seeds seed..)")
      ->capture_default_str();
  app.add_option("--batch-size", f->batch_size, "--sparse: batch of the calibration inputs")->capture_default_str();
  app.add_option("--generator", f->generators,
                 "--sparse: one layer per generator (banded, clustered, sinks, npy:DIR, safetensors:FILE); "
                 "--kernels/--batch: the suite's input generators")
      ->delimiter(',');
  app.add_option("--seed", f->seed, "--sparse: first calibration seed (held-out check: the next seed after them)");
  app.add_option("--dense-backend", f->dense_backend,
                 "--sparse: dense output to compare with (default flash2 / cpu-flash)");
  app.add_option("--sparse-out", f->sparse_out,
                 "--sparse: the config file to write (default <out>/sparse-config.json)");
  app.add_option("--suite", f->suite, "Suite whose cases to tune (default: headline with a GPU, else default)");
  app.add_option("-b,--backends", f->backends, "Backends (comma-separated)")->delimiter(',');
  app.add_option("--dtype", f->dtypes, "fp32, fp16, bf16, e4m3")->delimiter(',');
  app.add_option("--seq", f->seqs, "Sequence lengths")->delimiter(',');
  app.add_option("--model", f->models, "Model presets for the head axes")->delimiter(',');
  app.add_option("--heads", f->heads, "Query heads")->delimiter(',');
  app.add_option("--kv-heads", f->kv_heads, "Key/value heads")->delimiter(',');
  app.add_option("--head-dim", f->head_dims, "Head dims")->delimiter(',');
  app.add_option("--causal", f->causal, "true, false or both")->delimiter(',');
  app.add_option("--pass", f->passes, "--batch/--kernels: fwd, bwd, fwd+bwd (fwd+bwd: tune a training step)")
      ->delimiter(',');
  app.add_option("--max-memory-gib", f->max_memory_gib,
                 "Memory limit per case: inputs plus the peak extra memory (default: what the device has)");
  app.add_option("--p95-ms", f->p95_ms, "p95 latency target per forward (default: none)");
  app.add_option("--min-batch", f->min_batch, "Smallest batch to consider")->capture_default_str();
  app.add_option("--max-batch", f->max_batch, "Largest batch to consider")->capture_default_str();
  app.add_option("--tolerance", f->tolerance,
                 "> 0: the batch search does not split a side of the peak whose throughput is within this "
                 "(relative) or twice its noise of the best (fewer probes, may miss a wave-quantization peak)")
      ->capture_default_str();
  app.add_option("--flat-gain", f->flat_gain,
                 "The search stops growing the batch at a step (x4) that gains less throughput than this "
                 "(relative) or twice the noise: a flat curve, as on a CPU (0: grow to the limits)")
      ->capture_default_str();
  app.add_option("--time-budget", f->time_budget_s,
                 "Seconds of probes per case: no probe starts after them, the answer is the best batch so far "
                 "(0: none; --exhaustive's sweep is not bound by it)")
      ->capture_default_str();
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
  app.add_flag("-q,--quiet", f->quiet, "No progress and no table: the closing lines (and errors) only");
  app.add_option("--cache", f->cache,
                 "Backend cache to update with the fastest backends per shape class, which backend=\"auto\" "
                 "reads (default: " +
                     tune::default_cache_path().string() + ")");
  app.add_flag("--no-cache", f->no_cache, "Do not update the backend cache");

  return [f]() -> int {
    if ((f->kernels ? 1 : 0) + (f->batch ? 1 : 0) + (f->sparse ? 1 : 0) > 1)
      throw Error(ErrorKind::Usage, "tune takes one of --batch, --kernels or --sparse, not several");
    if (f->kernels) return tune_kernels(*f);
    if (f->sparse) return run_sparse_tune(*f);
    if (!f->batch)
      throw Error(ErrorKind::Usage,
                  "tune needs --batch (the batch-size tuner), --kernels (kernel configurations) or --sparse (the "
                  "sparse predictor)");

    tune::TuneOptions options;
    options.limits.min_batch = f->min_batch;
    options.limits.max_batch = f->max_batch;
    if (f->max_memory_gib) options.limits.max_memory_bytes = *f->max_memory_gib * 1073741824.0;
    options.limits.max_p95_ms = f->p95_ms;
    options.limits.tolerance = f->tolerance;
    options.limits.flat_gain = f->flat_gain;
    options.limits.time_budget_s = f->time_budget_s;
    options.limits.validate();
    options.exhaustive = f->exhaustive;
    options.reference_gflop = f->reference_gflop;
    options.out_dir = f->out;
    options.force = f->force;
    if (!f->no_cache)
      options.cache_path = f->cache.empty() ? tune::default_cache_path() : std::filesystem::path(f->cache);
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
    if (!f->quiet) fmt::print("{}\n", outcome.table_terminal);
    fmt::print("{} {} tuned. Results in {}/ (tune.json: every probe's row and the tuning; tune.md)\n", cases,
               cases == 1 ? "case" : "cases", outcome.out_dir.string());
    if (outcome.cache_path)
      fmt::print("Backend cache {}: {} shape {} updated (backend=\"auto\" reads it)\n", outcome.cache_path->string(),
                 outcome.cache_classes, outcome.cache_classes == 1 ? "class" : "classes");
    if (outcome.interrupted) fmt::print(stderr, "attnsuite: interrupted; the cases tuned so far are saved\n");
    if (outcome.nothing_ran && !outcome.failed)
      fmt::print(stderr, "attnsuite: nothing ran: every case was skipped (the reasons are in the table)\n");
    return run_exit_code(outcome.interrupted, outcome.failed, outcome.nothing_ran);
  };
}

}  // namespace attnsuite::cli
