// One result row per case: the CSV columns and JSON keys of ARCHITECTURE.md, in that order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnsuite::bench {

enum class CaseStatus { Ok, Skipped, Failed };
std::string_view to_string(CaseStatus status);
std::optional<CaseStatus> parse_case_status(std::string_view text);

struct ResultRow {
  // What was run.
  std::string backend;       // registry name
  std::string display_name;  // "FlashAttention-2 (PyTorch flash backend)"
  std::string peer_of;       // empty for ours
  std::string device;        // "cpu" | "cuda:0"
  std::string gpu;           // GPU name, or the CPU model for CPU backends
  std::string dtype;
  std::string layout;
  int batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0, head_dim = 0;
  bool causal = false;
  int window_left = -1, window_right = -1;
  std::string generator;
  std::uint64_t seed = 0;

  // Timing (milliseconds), over `reps` measured repetitions after warm-up.
  std::optional<double> ms_median, ms_mean, ms_p05, ms_p95, ms_min, ms_stddev;
  int reps = 0;
  std::optional<double> tokens_per_s, tflops, gbps;

  // Memory: peak extra bytes the backend allocated during one forward (inputs and O excluded).
  std::optional<double> peak_mem_mib, mem_vs_vanilla, speedup_vs_vanilla;

  // Accuracy against the fp64 reference.
  std::optional<double> max_abs_err, rel_l2, rel_l1, cos_sim, rmse;
  std::optional<double> accuracy_fraction;  // share of (batch, head) slices compared; 1 = all

  std::optional<double> sparsity;   // sparse kernels only
  std::optional<double> clock_mhz;  // GPU SM clock, start of case
  std::string bottleneck;           // compute-bound | memory-bound | latency-bound
  CaseStatus status = CaseStatus::Ok;
  std::string reason;               // why skipped or failed; warnings for ok rows

  // Identity of the case, independent of results: used by --resume and compare.
  std::string case_key() const;
  // Identity without the backend: rows of different backends on the same inputs share it.
  std::string shape_key() const;
};

// Column names in order; the CSV header and the JSON keys.
const std::vector<std::string>& result_columns();

// What a column holds, so text formats (CSV) can be read back. Number columns are optional:
// an empty CSV cell or JSON null is a missing value; NaN and infinities are "nan", "inf", "-inf".
enum class ColumnType { Text, Integer, Boolean, Number };
std::optional<ColumnType> column_type(std::string_view column);  // nullopt: not a column of ours

nlohmann::json to_json(const ResultRow& row);
// The same object with its keys in column order, for files that people read (JSONL, .json).
nlohmann::ordered_json to_ordered_json(const ResultRow& row);
// Throws Error(Io) naming the field and what was expected on a malformed row. "backend" and
// "status" are required; other missing keys keep their defaults (a file of an older version);
// unknown keys are ignored (a file of a newer version).
ResultRow row_from_json(const nlohmann::json& value);

// The header of a results file: where and when it was measured.
struct RunHeader {
  std::string tool_version;
  std::string git_commit;
  std::string started_at;  // ISO 8601 UTC
  std::string finished_at;
  std::string hostname;
  std::string cpu_model;
  int cpu_threads = 0;
  std::string simd;
  double cpu_fp32_peak_gflops = 0;  // measured FMA peak when the sweep has CPU backends; 0: not measured
  std::string gpu_name, gpu_driver, cuda_version, cudnn_version, torch_version;
  std::string suite;
  nlohmann::json settings;  // timing options, noise target, etc.
  bool interrupted = false;
};

nlohmann::json to_json(const RunHeader& header);
RunHeader header_from_json(const nlohmann::json& value);

}  // namespace attnsuite::bench
