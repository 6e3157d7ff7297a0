// One batch-size tune, as `attnsuite tune --batch` and attnsuite.tune_batch_size() (Python) run
// it: every case of a suite (backend × shape, the batch left to the tuner) searched by the
// benchmark runner, the results written as tune.json (every probe's row, the header, the
// "tuning" array) and tune.md, and the backend cache (backend_cache.hpp) updated.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/result.hpp"
#include "tune/batch_tuner.hpp"

namespace attnsuite::tune {

// Each probe checks its output against a sampled fp64 reference; a smaller budget than bench's
// keeps that a small part of a probe (a new batch is a new shape: a new reference).
inline constexpr double kTuneReferenceGflop = 0.1;

struct TuneOptions {
  BatchLimits limits;
  bool exhaustive = false;                // also sweep every batch (the search's check)
  std::optional<double> reference_gflop;  // default: min(the suite's, kTuneReferenceGflop)
  std::filesystem::path out_dir;          // empty: results/tune-<suite>-<time>
  bool force = false;                     // overwrite a tune.json in out_dir
  // The backend cache to update; nullopt: none. The CLI's default is default_cache_path().
  std::optional<std::filesystem::path> cache_path;
  std::function<bool()> cancelled;
  // Progress: a case starts (its identity row), a probe's row, the exhaustive sweep starts.
  std::function<void(const bench::ResultRow&)> on_case;
  std::function<void(const bench::ResultRow&)> on_probe;
  std::function<void()> on_sweep;
};

struct TuneOutcome {
  std::filesystem::path out_dir;
  nlohmann::ordered_json document;  // what tune.json holds: header, rows, tuning
  std::string table_terminal;       // tune_output.hpp's tuning_table
  std::vector<std::string> warnings;
  std::optional<std::filesystem::path> cache_path;  // the cache updated, if any
  int cache_classes = 0;                            // shape classes it updated
  bool failed = false;       // a probe failed for another reason than memory (the search stopped)
  bool interrupted = false;  // cancelled; the cases tuned so far are saved
  bool nothing_ran = false;  // every probe was skipped: no backend could run its case here
};

// The spec the tuner runs: `suite_json` (a suite with overrides merged), its batch axis and
// tokens-per-batch dropped (the tuner chooses the batch). Validates the limits and the
// backends' names. Throws Error(Usage) for bad values.
bench::SweepSpec tune_spec(const nlohmann::json& suite_json, const std::string& source, const TuneOptions& options);

// results/<name>-<UTC time, ':' as '-'>: where a tune writes when no --out is given.
std::filesystem::path default_out_dir(std::string_view name);

// Runs the tune. Throws Error(Usage) when out_dir/tune.json exists and !force, Error(Io) when
// out_dir cannot be written; a case that fails is recorded (TuneOutcome::failed), not thrown.
TuneOutcome run_batch_tune(const bench::SweepSpec& spec, const TuneOptions& options, Registry& registry);

}  // namespace attnsuite::tune
