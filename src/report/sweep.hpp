// A whole sweep: cases in order, rows streamed to JSONL as they finish, --resume, and the final
// CSV / JSON / Markdown files. The CLI and the Python package both call this.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/result.hpp"
#include "report/shard.hpp"

namespace attnsuite::bench {

struct SweepProgress {
  std::size_t done = 0;  // cases finished, this run and resumed
  std::size_t total = 0;
  double eta_seconds = -1;              // -1 until one case was timed
  const Case* current = nullptr;        // the case about to run; null once finished
  const ResultRow* finished = nullptr;  // the row just recorded
};

struct SweepOptions {
  std::filesystem::path out_dir;  // created if missing
  bool resume = false;            // keep rows already in out_dir/results.jsonl, run the rest
  bool force = false;             // overwrite results already in out_dir
  nlohmann::json suite_json;      // what the spec was parsed from, saved as out_dir/suite.json
  std::function<void(const SweepProgress&)> on_progress;
  std::function<bool()> cancelled;  // polled between and inside cases

  // --- Multi-GPU and multi-process sweeps (issue 10, docs/multi-gpu.md) ------------------------
  // Set: this process runs only its shard's cases (i % world == rank) and writes them, with
  // shard.json, into out_dir/shard-<rank>-of-<world>/; `attnsuite merge` joins the shards.
  std::optional<ShardInfo> shard;
  // Non-empty: one worker thread per listed GPU over a shared queue (bench/gpu_workers.hpp); the
  // rows are written in the plan's order at the end.
  std::vector<int> gpus;
  // >= 0 (and gpus empty): run the CUDA backends on this device instead of cuda:0 (a process
  // of a multi-process launch on its LOCAL_RANK's GPU).
  int cuda_device = -1;
};

struct SweepOutcome {
  RunHeader header;
  std::vector<ResultRow> rows;  // every row of the run (resumed ones first), with vanilla ratios
  std::filesystem::path out_dir;
  std::size_t resumed = 0;
  bool interrupted = false;
  std::vector<std::string> warnings;  // e.g. a torn last line of an interrupted results.jsonl
};

// File names inside the output directory.
inline constexpr const char* kRowsFile = "results.jsonl";
inline constexpr const char* kCsvFile = "results.csv";
inline constexpr const char* kJsonFile = "results.json";
inline constexpr const char* kMarkdownFile = "summary.md";
inline constexpr const char* kSuiteFile = "suite.json";

// Throws Error(Usage) when out_dir already holds results and neither resume nor force is set.
SweepOutcome run_sweep(const SweepSpec& spec, const SweepOptions& options, Registry& registry);

// Machine, versions, git commit and time: the header of every results file. The ceilings of the
// devices the spec's backends run on are measured here, once per run (a second or so per
// device); a measurement that fails leaves its ceilings at 0 with a line in *warnings.
RunHeader make_run_header(const SweepSpec& spec, Registry& registry, std::vector<std::string>* warnings = nullptr);

std::string utc_now_iso8601();

}  // namespace attnsuite::bench
