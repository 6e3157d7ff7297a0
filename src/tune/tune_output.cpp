#include "tune/tune_output.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench/statistics.hpp"

namespace attnsuite::tune {

namespace {

constexpr double kGiB = 1073741824.0;

std::string_view outcome_name(BatchMeasurement::Outcome outcome) {
  switch (outcome) {
    case BatchMeasurement::Outcome::Ok:
      return "ok";
    case BatchMeasurement::Outcome::OutOfMemory:
      return "out of memory";
    case BatchMeasurement::Outcome::Failed:
      return "failed";
  }
  return "unknown";
}

nlohmann::ordered_json probe_json(const BatchProbe& p) {
  nlohmann::ordered_json out;
  out["batch"] = p.batch;
  out["phase"] = p.phase;
  out["outcome"] = outcome_name(p.measurement.outcome);
  out["feasible"] = p.feasible;
  out["reason"] = p.feasible ? p.measurement.reason : p.infeasible_reason;
  const bool measured = p.measurement.outcome == BatchMeasurement::Outcome::Ok;
  auto number = [&](double value) {
    return measured ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
  };
  out["tokens_per_s"] = number(p.measurement.tokens_per_s);
  out["median_ms"] = number(p.measurement.median_ms);
  out["p95_ms"] = number(p.measurement.p95_ms);
  out["memory_gib"] = number(p.measurement.memory_bytes / kGiB);
  out["noise"] = number(p.measurement.noise);
  out["device_retained_mib"] = p.measurement.device_retained_bytes
                                   ? nlohmann::ordered_json(*p.measurement.device_retained_bytes / 1048576.0)
                                   : nlohmann::ordered_json(nullptr);
  return out;
}

nlohmann::ordered_json result_json(const BatchTuneResult& r) {
  nlohmann::ordered_json out;
  out["best"] = r.best ? probe_json(*r.best) : nlohmann::ordered_json(nullptr);
  out["reason"] = r.no_result_reason();
  out["largest_feasible"] = r.largest_feasible;
  out["evaluations"] = r.evaluations();
  out["seconds"] = r.seconds;
  // Why the search ended before the limits: a flat curve (the grow step to this batch gained
  // too little), or the time budget.
  out["flat_from"] = r.flat_from > 0 ? nlohmann::ordered_json(r.flat_from) : nlohmann::ordered_json(nullptr);
  out["time_budget_reached"] = r.time_budget_reached;
  out["interrupted"] = r.interrupted;
  out["probes"] = nlohmann::ordered_json::array();
  for (const BatchProbe& p : r.probes) out["probes"].push_back(probe_json(p));
  return out;
}

}  // namespace

bool agrees_within_noise(const BatchProbe& search_best, const BatchProbe& sweep_best) {
  return search_best.batch == sweep_best.batch || within_noise_of(search_best, sweep_best, bench::kMinRelativeChange);
}

void write_shape(nlohmann::ordered_json& out, const bench::ResultRow& identity) {
  out["heads_q"] = identity.heads_q;
  out["heads_kv"] = identity.heads_kv;
  out["seq_q"] = identity.seq_q;
  out["seq_kv"] = identity.seq_kv;
  out["head_dim"] = identity.head_dim;
  out["causal"] = identity.causal;
}

nlohmann::ordered_json to_json(const TuneEntry& e) {
  const bench::ResultRow& id = e.identity;
  nlohmann::ordered_json out;
  out["backend"] = id.backend;
  out["display_name"] = id.display_name;
  out["peer_of"] = id.peer_of;
  out["device"] = id.device;
  out["dtype"] = id.dtype;
  write_shape(out, id);
  out["generator"] = id.generator;
  out["layout"] = id.layout;  // layout and window: the backend cache's shape class (backend_cache.hpp)
  out["window_left"] = id.window_left;
  out["window_right"] = id.window_right;
  nlohmann::ordered_json limits;
  limits["min_batch"] = e.limits.min_batch;
  limits["max_batch"] = e.limits.max_batch;
  limits["max_memory_gib"] = e.limits.max_memory_bytes ? nlohmann::ordered_json(*e.limits.max_memory_bytes / kGiB)
                                                       : nlohmann::ordered_json(nullptr);
  limits["p95_ms"] =
      e.limits.max_p95_ms ? nlohmann::ordered_json(*e.limits.max_p95_ms) : nlohmann::ordered_json(nullptr);
  limits["tolerance"] = e.limits.tolerance;
  limits["flat_gain"] = e.limits.flat_gain;
  limits["time_budget_s"] = e.limits.time_budget_s;
  out["limits"] = limits;
  out["search"] = result_json(e.search);
  if (e.sweep) {
    nlohmann::ordered_json sweep = result_json(*e.sweep);
    if (e.search.best && e.sweep->best) {
      sweep["agrees"] = agrees_within_noise(*e.search.best, *e.sweep->best);
      sweep["search_vs_sweep"] = e.search.best->measurement.tokens_per_s / e.sweep->best->measurement.tokens_per_s;
    }
    out["exhaustive"] = sweep;
  }
  return out;
}

}  // namespace attnsuite::tune
