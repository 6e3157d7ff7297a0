#include "tune/tune_run.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "attnsuite/error.hpp"
#include "bench/profile.hpp"
#include "bench/runner.hpp"
#include "core/atomic_file.hpp"
#include "report/sinks.hpp"
#include "report/sweep.hpp"
#include "report/tuning_table.hpp"
#include "tune/backend_cache.hpp"
#include "tune/batch_evaluator.hpp"
#include "tune/tune_output.hpp"

namespace attnsuite::tune {

bench::SweepSpec tune_spec(const nlohmann::json& suite_json, const std::string& source, const TuneOptions& options) {
  options.limits.validate();
  // The tuner chooses the batch: a suite's tokens per batch (fa3-grid's) does not apply.
  nlohmann::json without_batch = suite_json;
  if (without_batch.is_object()) without_batch.erase("tokens_per_batch");
  bench::SweepSpec spec = bench::parse_suite(without_batch, source);
  spec.batches = {options.limits.min_batch};
  spec.tokens_per_batch = 0;
  spec.reference_gflop = options.reference_gflop.value_or(std::min(spec.reference_gflop, kTuneReferenceGflop));
  for (const auto& name : spec.backends) (void)Registry::global().find(name);
  return spec;
}

std::filesystem::path default_out_dir(std::string_view name) {
  std::string stamp = bench::utc_now_iso8601().substr(0, 19);
  std::replace(stamp.begin(), stamp.end(), ':', '-');
  return std::filesystem::path("results") / fmt::format("{}-{}", name, stamp);
}

TuneOutcome run_batch_tune(const bench::SweepSpec& spec, const TuneOptions& options, Registry& registry) {
  const BatchLimits& limits = options.limits;
  limits.validate();
  for (const auto& name : spec.backends) (void)registry.find(name);
  TuneOutcome outcome;
  outcome.out_dir = options.out_dir;
  if (outcome.out_dir.empty()) outcome.out_dir = default_out_dir("tune-" + spec.name);
  const std::filesystem::path json_path = outcome.out_dir / "tune.json";
  if (std::filesystem::exists(json_path) && !options.force)
    throw Error(ErrorKind::Usage, fmt::format("'{}' already exists; use --force to overwrite it", json_path.string()));
  report::ensure_writable_directory(outcome.out_dir);

  bench::RunHeader header = bench::make_run_header(spec, registry, &outcome.warnings);
  header.suite = "tune: " + spec.name;
  const auto gib = limits.max_memory_bytes ? nlohmann::json(*limits.max_memory_bytes / 1073741824.0) : nlohmann::json();
  header.settings["tune"] = {{"min_batch", limits.min_batch},
                             {"max_batch", limits.max_batch},
                             {"max_memory_gib", gib},
                             {"p95_ms", limits.max_p95_ms ? nlohmann::json(*limits.max_p95_ms) : nlohmann::json()},
                             {"tolerance", limits.tolerance},
                             {"flat_gain", limits.flat_gain},
                             {"time_budget_s", limits.time_budget_s},
                             {"exhaustive", options.exhaustive}};

  bench::Runner runner(spec, registry);
  std::vector<bench::ResultRow> rows;
  nlohmann::ordered_json tuning = nlohmann::ordered_json::array();
  const auto cancelled = options.cancelled ? options.cancelled : [] { return false; };
  bool any_ran = false;
  for (const bench::Case& c : bench::expand(spec)) {
    if (outcome.interrupted) break;
    TuneEntry entry;
    entry.identity = bench::row_for_case(c, registry.contains(c.backend) ? &registry.find(c.backend) : nullptr);
    entry.limits = limits;
    if (options.on_case) options.on_case(entry.identity);
    RunnerBatchEvaluator evaluate(runner, registry, c, cancelled);
    if (options.on_probe) evaluate.on_row(options.on_probe);
    entry.search = search_batch(std::ref(evaluate), limits);
    if (options.exhaustive && !entry.search.interrupted && entry.search.failure.empty()) {
      if (options.on_sweep) options.on_sweep();
      entry.sweep = sweep_batches(std::ref(evaluate), limits, entry.search.probes);
    }
    outcome.interrupted = entry.search.interrupted || (entry.sweep && entry.sweep->interrupted);
    // A case the backend cannot run here (its probe skipped) is not tuned, which is no failure;
    // a tune where that is every case ran nothing (TuneOutcome::nothing_ran).
    const bool ran = std::any_of(evaluate.rows().begin(), evaluate.rows().end(),
                                 [](const bench::ResultRow& r) { return r.status != bench::CaseStatus::Skipped; });
    any_ran = any_ran || ran;
    if (ran)
      outcome.failed =
          outcome.failed || !entry.search.failure.empty() || (entry.sweep && !entry.sweep->failure.empty());
    for (bench::ResultRow row : evaluate.rows()) {
      bench::apply_profile(row, header.ceilings);
      rows.push_back(std::move(row));
    }
    tuning.push_back(to_json(entry));
  }
  outcome.nothing_ran = !any_ran && !outcome.interrupted;
  header.finished_at = bench::utc_now_iso8601();
  header.interrupted = outcome.interrupted;
  report::fill_relative_to_vanilla(rows);

  outcome.document = nlohmann::ordered_json::parse(report::results_json_text(header, rows));
  outcome.document["tuning"] = tuning;
  report::write_file_atomic(json_path, outcome.document.dump(2) + "\n");
  const report::TextTable table = report::tuning_table(nlohmann::json(tuning));
  report::write_file_atomic(outcome.out_dir / "tune.md", table.markdown());
  outcome.table_terminal = table.terminal();
  const bool forward_only = std::all_of(spec.passes.begin(), spec.passes.end(),
                                        [](bench::Pass pass) { return pass == bench::Pass::Forward; });
  if (options.cache_path && !forward_only)
    outcome.warnings.push_back(
        "backend cache not updated: it answers backend=\"auto\" for forwards, and this tune "
        "timed a pass with a backward");
  if (options.cache_path && forward_only) {
    // A cache that cannot be written costs the next `auto` its choice, not the tune its results.
    try {
      outcome.cache_classes = update_cache_file(*options.cache_path, nlohmann::json(outcome.document["header"]),
                                                nlohmann::json(tuning), json_path.string());
      outcome.cache_path = options.cache_path;
    } catch (const Error& error) {
      outcome.warnings.push_back(fmt::format("backend cache not updated: {}", error.what()));
    }
  }
  return outcome;
}

}  // namespace attnsuite::tune
