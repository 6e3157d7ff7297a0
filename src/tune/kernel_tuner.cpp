#include "tune/kernel_tuner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnsuite/error.hpp"
#include "bench/statistics.hpp"
#include "report/sinks.hpp"
#include "report/table.hpp"
#include "tune/tune_output.hpp"

namespace attnsuite::tune {
namespace {

// Relative standard error of a row's median, from its spread and repetitions.
double relative_noise(const bench::ResultRow& row) {
  if (!row.ms_median || *row.ms_median <= 0 || !row.ms_stddev || row.reps <= 0) return 0.0;
  return *row.ms_stddev / *row.ms_median / std::sqrt(static_cast<double>(row.reps));
}

std::optional<double> number_at(const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  if (found == object.end() || !found->is_number()) return std::nullopt;
  return found->get<double>();
}

}  // namespace

bool faster_beyond_noise(const bench::ResultRow& candidate, const bench::ResultRow& reference) {
  if (!candidate.ms_median || !reference.ms_median || *reference.ms_median <= 0) return false;
  const double a = relative_noise(candidate), b = relative_noise(reference);
  const double threshold = bench::same_within(a, b);
  return *candidate.ms_median < *reference.ms_median * (1 - threshold);
}

bool accurate_as(const bench::ResultRow& candidate, const bench::ResultRow& reference) {
  if (!candidate.rel_l2 || !reference.rel_l2) return true;
  return *candidate.rel_l2 <= 2.0 * *reference.rel_l2 + 1e-4;
}

KernelTuneResult tune_kernel_case(bench::Runner& runner, Registry& registry, const bench::Case& c,
                                  const std::function<bool()>& cancelled,
                                  const std::function<void(const std::string&, const bench::ResultRow&)>& on_row) {
  KernelTuneResult result;
  Backend* backend = registry.contains(c.backend) ? &registry.find(c.backend) : nullptr;
  result.identity = bench::row_for_case(c, backend);
  if (backend == nullptr) {
    result.not_tuned = fmt::format("unknown backend '{}'", c.backend);
    return result;
  }
  if (!c.invalid_reason.empty()) {
    result.not_tuned = c.invalid_reason;
    return result;
  }
  const std::vector<std::string> configs = backend->kernel_configs(c.problem);
  if (configs.empty()) {
    result.not_tuned = "has no kernel configurations to choose from";
    return result;
  }
  if (const Support support = backend->supports(c.problem); !support) {
    result.not_tuned = support.reason;
    return result;
  }
  result.key = backend->kernel_config_key(c.problem, runner.plan_options(c, *backend));
  for (const std::string& config : configs) {
    bench::Case with_config = c;
    with_config.kernel_config = config;
    std::optional<bench::ResultRow> row = runner.run(with_config, cancelled);
    if (!row) {
      result.interrupted = true;
      return result;
    }
    if (row->kernel_config.empty()) row->kernel_config = config;
    if (on_row) on_row(config, *row);
    result.candidates.push_back({config, std::move(*row)});
  }
  const auto ok = [](const KernelCandidate& k) { return k.row.status == bench::CaseStatus::Ok && k.row.ms_median; };
  const KernelCandidate& first = result.candidates.front();
  // Without the built-in choice's row there is no accuracy to hold the others to: none is chosen.
  if (!ok(first)) {
    result.not_tuned = fmt::format("the built-in configuration {} did not run: {}", first.config, first.row.reason);
    return result;
  }
  // The runner leaves a wrong log-sum-exp in the row's reason (the status stays Ok): a
  // configuration whose LSE is wrong where the built-in's is right is not chosen either (the
  // backward reads it).
  const auto lse_wrong = [](const bench::ResultRow& row) { return row.reason.starts_with("log-sum-exp differs"); };
  const KernelCandidate* best = &first;
  for (KernelCandidate& candidate : result.candidates) {
    if (!ok(candidate) || &candidate == &first) continue;
    if (!accurate_as(candidate.row, first.row)) {
      candidate.excluded = fmt::format("less accurate than the built-in {}: rel-L2 {:.3g} against {:.3g}", first.config,
                                       *candidate.row.rel_l2, *first.row.rel_l2);
      continue;
    }
    if (lse_wrong(candidate.row) && !lse_wrong(first.row)) {
      candidate.excluded = fmt::format("its {}, the built-in {}'s not", candidate.row.reason, first.config);
      continue;
    }
    // Against the default: only beyond the noise; among alternatives: the lower median.
    if ((best == &first ? faster_beyond_noise(candidate.row, first.row)
                        : *candidate.row.ms_median < *best->row.ms_median)) {
      best = &candidate;
    }
  }
  result.best = best->config;
  result.speedup = *first.row.ms_median / *best->row.ms_median;
  return result;
}

nlohmann::ordered_json to_json(const KernelTuneResult& r) {
  const bench::ResultRow& id = r.identity;
  nlohmann::ordered_json out;
  out["backend"] = id.backend;
  out["dtype"] = id.dtype;
  out["batch"] = id.batch;
  write_shape(out, id);
  out["device"] = r.key.device;
  out["driver"] = r.key.driver;
  out["shape_class"] = r.key.shape_class;
  nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
  for (const KernelCandidate& candidate : r.candidates) {
    nlohmann::ordered_json item;
    item["config"] = candidate.config;
    item["status"] = std::string(bench::to_string(candidate.row.status));
    item["ms_median"] = candidate.row.ms_median ? nlohmann::ordered_json(*candidate.row.ms_median) : nullptr;
    item["ms_stddev"] = candidate.row.ms_stddev ? nlohmann::ordered_json(*candidate.row.ms_stddev) : nullptr;
    item["reps"] = candidate.row.reps;
    item["tflops"] = candidate.row.tflops ? nlohmann::ordered_json(*candidate.row.tflops) : nullptr;
    item["rel_l2"] = candidate.row.rel_l2 ? nlohmann::ordered_json(*candidate.row.rel_l2) : nullptr;
    if (!candidate.row.reason.empty()) item["reason"] = candidate.row.reason;
    if (!candidate.excluded.empty()) item["excluded"] = candidate.excluded;
    candidates.push_back(std::move(item));
  }
  out["candidates"] = std::move(candidates);
  out["best"] = r.best.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.best);
  out["speedup_vs_default"] = r.speedup;
  if (!r.not_tuned.empty()) out["not_tuned"] = r.not_tuned;
  if (r.interrupted) out["interrupted"] = true;
  return out;
}

report::TextTable kernel_tuning_table(const nlohmann::json& tuning) {
  report::TextTable table({{"backend", report::Align::Left},
                           {"shape", report::Align::Left},
                           {"seq len", report::Align::Right},
                           {"shape class", report::Align::Left},
                           {"default ms", report::Align::Right},
                           {"best", report::Align::Left},
                           {"best ms", report::Align::Right},
                           {"speedup", report::Align::Right},
                           {"tried", report::Align::Right}});
  for (const auto& entry : tuning) {
    std::string shape = fmt::format("B{} H{}/{} d{} {}", entry.value("batch", 0), entry.value("heads_q", 0),
                                    entry.value("heads_kv", 0), entry.value("head_dim", 0), entry.value("dtype", ""));
    if (entry.value("causal", false)) shape += " causal";
    const int seq_q = entry.value("seq_q", 0), seq_kv = entry.value("seq_kv", 0);
    const std::string seq = seq_q == seq_kv ? std::to_string(seq_q) : fmt::format("{}/{}", seq_q, seq_kv);
    const std::string backend = entry.value("backend", "");
    if (entry.contains("not_tuned")) {
      table.add_spanning_row({backend, shape, seq}, "not tuned: " + entry.value("not_tuned", std::string()));
      continue;
    }
    const auto& candidates = entry.at("candidates");
    std::optional<double> default_ms, best_ms;
    const std::string best = entry.value("best", "");
    for (const auto& candidate : candidates) {
      if (&candidate == &candidates.front()) default_ms = number_at(candidate, "ms_median");
      if (candidate.value("config", "") == best) best_ms = number_at(candidate, "ms_median");
    }
    table.add_row({backend, shape, seq, entry.value("shape_class", ""),
                   default_ms ? report::format_ms(*default_ms) : "–", best, best_ms ? report::format_ms(*best_ms) : "–",
                   fmt::format("{:.2f}×", entry.value("speedup_vs_default", 1.0)), std::to_string(candidates.size())});
  }
  return table;
}

}  // namespace attnsuite::tune
