// One result row per case: the CSV columns and JSON keys of ARCHITECTURE.md, in that order.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/error.hpp"
#include "core/ceilings.hpp"

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
  std::string pass = "fwd";  // fwd | bwd | fwd+bwd (to_string(Pass))

  // Timing (milliseconds), over `reps` measured repetitions after warm-up.
  std::optional<double> ms_median, ms_mean, ms_p05, ms_p95, ms_min, ms_stddev;
  int reps = 0;
  std::optional<double> tokens_per_s, tflops, gbps;

  // Memory: peak extra bytes the backend allocated during one forward (inputs excluded, O and
  // LSE included) — "allocated"; and what the process held on the device right after that
  // forward beyond what it held before it — "reserved" (caching allocators, library
  // workspaces; GPU only, from cudaMemGetInfo).
  std::optional<double> peak_mem_mib, mem_reserved_mib, mem_vs_vanilla, speedup_vs_vanilla;

  // Accuracy against the fp64 reference: of O for the forward; for a pass with a backward the
  // worst of the three gradients (each also in its own columns below).
  std::optional<double> max_abs_err, rel_l2, rel_l1, cos_sim, rmse;
  std::optional<double> dq_max_abs_err, dq_rel_l2, dq_rel_l1, dq_cos_sim;
  std::optional<double> dk_max_abs_err, dk_rel_l2, dk_rel_l1, dk_cos_sim;
  std::optional<double> dv_max_abs_err, dv_rel_l2, dv_rel_l1, dv_cos_sim;
  std::optional<double> accuracy_fraction;  // share of (batch, head) slices compared; 1 = all

  // Sparse kernels only: achieved sparsity (the share of the dense block work not done, P·V
  // skips included), the predictor's share of that (1 − kept / visible key blocks), the
  // predictor's time within ms_median, and TFLOP/s counting only the work done (`tflops` stays
  // the dense-equivalent rate).
  std::optional<double> sparsity;
  std::optional<double> predicted_sparsity, predictor_ms, effective_tflops;
  // The kernel configuration (tile sizes, stages) the backend ran, for backends that have a
  // choice (Backend::kernel_configs): the case's own (`tune --kernels`), the kernel-config cache's,
  // or the built-in one. Empty for the others.
  std::string kernel_config;
  // Which CTA ran which work (KernelPlan::work_order: "grid", "persistent", "paired", ...), for
  // backends that choose it per problem; empty for the others.
  std::string work_order;
  // The backend options the case ran with, those its backend takes: "key=value;key=value".
  std::string backend_options;
  // GPU SM clock and utilization, sampled through NVML on a thread while the case is timed:
  // mean and lowest clock (the clock at the start of the case when no sample was taken), mean
  // utilization in percent.
  std::optional<double> clock_mhz, clock_mhz_min, gpu_util_pct;
  // Profile against the device ceilings of the run header (docs/methodology.md, "Profile"):
  // FLOPs per byte of the minimum traffic, achieved share of the compute and memory ceilings,
  // and the bottleneck class that follows: compute-bound | memory-bound | latency-bound.
  std::optional<double> intensity, compute_ceiling_pct, memory_ceiling_pct;
  std::string bottleneck;
  CaseStatus status = CaseStatus::Ok;
  std::string reason;  // why skipped or failed; warnings for ok rows
  // Not a column: the kind of the attnsuite::Error that failed the case, so that a tuner can
  // tell "out of memory" (infeasible) from a broken backend. Unset for ok and skipped rows.
  std::optional<ErrorKind> error_kind;

  // Identity of the case, independent of results: used by --resume and compare.
  std::string case_key() const;
  // Identity without the backend: rows of different backends on the same inputs and pass share
  // it. (A forward row's key names no pass, as before the pass axis existed.)
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

// DeviceCeilings (core/ceilings.hpp) in the results header.
nlohmann::json to_json(const DeviceCeilings& ceilings);
DeviceCeilings ceilings_from_json(const nlohmann::json& value);

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
  DeviceCeilings ceilings;  // cpu_fp32_peak_gflops is repeated there as cpu_fp32_gflops
  std::string suite;
  nlohmann::json settings;  // timing options, noise target, etc.
  bool interrupted = false;
};

nlohmann::json to_json(const RunHeader& header);
RunHeader header_from_json(const nlohmann::json& value);

}  // namespace attnsuite::bench
