// A sweep: the cartesian product of named axes, from a suite file and/or CLI flags.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnsuite/problem.hpp"
#include "bench/statistics.hpp"

namespace attnsuite::bench {

// What a case times: the forward, the backward alone (from the forward's saved O and LSE), or
// both (a training step's attention). FLOPs: backward 2.5×, both 3.5× the forward's
// (FlashAttention's convention; docs/training.md).
enum class Pass { Forward, Backward, ForwardBackward };
std::string_view to_string(Pass pass);  // "fwd", "bwd", "fwd+bwd"
std::optional<Pass> parse_pass(std::string_view text);
// The pass's FLOPs as a multiple of the forward's.
double flops_factor(Pass pass);

struct HeadConfig {
  int heads_q = 16;
  int heads_kv = 16;
  int head_dim = 64;
  std::string model;  // preset name when it came from one
};

struct TimingOptions {
  MeasureOptions measure;
  bool cold = true;  // flush the last-level cache before every sample
};

struct SweepSpec {
  std::string name = "custom";
  std::string description;
  std::vector<std::string> backends;
  std::vector<DType> dtypes{DType::F16};
  std::vector<int> batches{1};
  int tokens_per_batch = 0;  // > 0: batch = tokens_per_batch / seq_q (>= every seq_q), batches ignored
  std::vector<int> seq_q{1024};
  std::vector<int> seq_kv;  // empty: the same as seq_q (self-attention)
  std::vector<HeadConfig> heads{HeadConfig{}};
  std::vector<bool> causal{false};
  std::vector<Pass> passes{Pass::Forward};
  std::vector<std::string> generators{"randn"};
  Layout layout = Layout::BSHD;
  int window_left = -1, window_right = -1;
  std::uint64_t seed = 0;
  TimingOptions timing;
  // Accuracy against the fp64 reference is computed on all (batch, head) slices while that
  // costs at most this many GFLOP, else on an evenly spaced sample of slices that fits.
  double reference_gflop = 4.0;
  // Options of the backends (PlanOptions::options), carried by every case: suite key
  // "backend_options" {"sparse_config": "FILE", "block_mask": "band:8"}; bench's --sparse-config
  // and --block-mask. Each key must be taken by at least one of the sweep's backends.
  std::map<std::string, std::string> backend_options;
  // Kernel configurations to run, by backend (PlanOptions::kernel_config): suite key
  // "kernel_config" {"flash3": "m192"}, bench's --kernel-config flash3=m192. A backend absent here
  // runs its own choice (the kernel-config cache, else its built-in rule).
  std::map<std::string, std::string> kernel_configs;
};

struct Case {
  AttentionProblem problem;
  std::string backend;
  std::string generator;
  std::uint64_t seed = 0;
  std::string model;
  Pass pass = Pass::Forward;
  std::string invalid_reason;  // non-empty: the axes combine into an impossible problem
  // What the plan is made with (PlanOptions): a kernel configuration to run ("" = the backend's
  // choice: the kernel-config cache, else its built-in rule) and the sweep's backend options.
  std::string kernel_config;
  std::map<std::string, std::string> backend_options;
};

// Cases in run order: every shape once, with the backends innermost so that backends are
// interleaved in time (drift of clocks and temperature spreads over all of them alike).
// Throws Error(Usage) above kMaxCases.
std::vector<Case> expand(const SweepSpec& spec);

// The most cases one sweep may expand to: a hostile or mistyped suite (three axes of a
// thousand values) is refused with the count instead of exhausting memory. The largest suite
// in bench/suites has 120.
inline constexpr std::uint64_t kMaxCases = 1000000;
// The number of cases expand() makes (saturating at UINT64_MAX).
std::uint64_t case_count(const SweepSpec& spec);

// Parses a suite (JSON text, or the JSON form of a TOML file). Strict: unknown keys, wrong
// types and values out of range throw Error(Usage) naming the source, the key and what is allowed.
SweepSpec parse_suite(const nlohmann::json& suite, const std::string& source);
// The JSON of a suite file's text; extension ".toml" parses TOML, anything else JSON.
// Malformed text throws Error(Usage) naming the source (and the line for TOML).
nlohmann::json parse_suite_text(const std::string& text, const std::string& extension, const std::string& source);
// Reads a suite by name (bench/suites/<name>.json|.toml, embedded in the binary) or by path.
nlohmann::json load_suite_json(const std::string& name_or_path);
std::vector<std::string> embedded_suite_names();
// Overlays `overrides` (keys as in a suite file) onto `base`: a key present in overrides wins.
nlohmann::json merge_suite(nlohmann::json base, const nlohmann::json& overrides);
// A sweep built from flags (or Python arguments) over the default suite, with no suite named:
// when `overrides` change its cases (any key but timing and accuracy), it is named "custom" and
// described as `what`, so that its results' title and default folder do not say "suite
// 'default'" of a sweep that is not the default suite.
void name_custom_sweep(nlohmann::json& suite, const nlohmann::json& overrides, const std::string& what);

}  // namespace attnsuite::bench
