#include "tune/tune_output.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench/statistics.hpp"
#include "report/sinks.hpp"

namespace attnsuite::tune {

namespace {

constexpr double kGiB = 1073741824.0;

std::string_view outcome_name(BatchMeasurement::Outcome outcome) {
  switch (outcome) {
    case BatchMeasurement::Outcome::Ok: return "ok";
    case BatchMeasurement::Outcome::OutOfMemory: return "out of memory";
    case BatchMeasurement::Outcome::Failed: return "failed";
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
  auto number = [&](double value) { return measured ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr); };
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

std::string gib_cell(double gib) {
  return gib >= 1 ? fmt::format("{:.3g} GiB", gib) : fmt::format("{:.3g} MiB", gib * 1024);
}

template <class Json>
std::optional<double> number_at(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->template get<double>();
}

}  // namespace

bool agrees_within_noise(const BatchProbe& search_best, const BatchProbe& sweep_best) {
  return search_best.batch == sweep_best.batch || within_noise_of(search_best, sweep_best, bench::kMinRelativeChange);
}

nlohmann::ordered_json to_json(const TuneEntry& e) {
  const bench::ResultRow& id = e.identity;
  nlohmann::ordered_json out;
  out["backend"] = id.backend;
  out["display_name"] = id.display_name;
  out["peer_of"] = id.peer_of;
  out["device"] = id.device;
  out["dtype"] = id.dtype;
  out["heads_q"] = id.heads_q;
  out["heads_kv"] = id.heads_kv;
  out["seq_q"] = id.seq_q;
  out["seq_kv"] = id.seq_kv;
  out["head_dim"] = id.head_dim;
  out["causal"] = id.causal;
  out["generator"] = id.generator;
  out["layout"] = id.layout;  // layout and window: the backend cache's shape class (backend_cache.hpp)
  out["window_left"] = id.window_left;
  out["window_right"] = id.window_right;
  nlohmann::ordered_json limits;
  limits["min_batch"] = e.limits.min_batch;
  limits["max_batch"] = e.limits.max_batch;
  limits["max_memory_gib"] = e.limits.max_memory_bytes ? nlohmann::ordered_json(*e.limits.max_memory_bytes / kGiB)
                                                       : nlohmann::ordered_json(nullptr);
  limits["p95_ms"] = e.limits.max_p95_ms ? nlohmann::ordered_json(*e.limits.max_p95_ms) : nlohmann::ordered_json(nullptr);
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

report::TextTable tuning_table(const nlohmann::json& tuning) {
  bool any_sweep = false, any_stop = false;
  // Why a search ended early: "flat from 16" (the step to batch 16 gained too little), "time budget".
  const auto stopped = [](const nlohmann::json& search) {
    std::string why;
    if (const auto flat = search.find("flat_from"); flat != search.end() && flat->is_number())
      why = fmt::format("flat from {}", flat->get<int>());
    if (search.value("time_budget_reached", false)) why += (why.empty() ? "" : ", ") + std::string("time budget");
    return why;
  };
  for (const auto& entry : tuning) {
    any_sweep = any_sweep || entry.contains("exhaustive");
    if (const auto search = entry.find("search"); search != entry.end()) any_stop = any_stop || !stopped(*search).empty();
  }
  std::vector<report::TableColumn> columns = {{"backend", report::Align::Left},
                                              {"shape", report::Align::Left},
                                              {"seq len", report::Align::Right},
                                              {"best batch", report::Align::Right},
                                              {"tokens/s", report::Align::Right},
                                              {"p95 ms", report::Align::Right},
                                              {"peak memory", report::Align::Right},
                                              {"evaluations", report::Align::Right}};
  if (any_stop) columns.push_back({"search stopped", report::Align::Left});
  if (any_sweep) {
    columns.push_back({"sweep best", report::Align::Right});
    columns.push_back({"sweep tokens/s", report::Align::Right});
    columns.push_back({"sweep evaluations", report::Align::Right});
    columns.push_back({"agrees", report::Align::Left});
  }
  report::TextTable table(std::move(columns));
  for (const auto& entry : tuning) {
    const std::string backend = !entry.value("peer_of", "").empty() && !entry.value("display_name", "").empty()
                                    ? entry.value("display_name", "")
                                    : entry.value("backend", "");
    std::string shape = fmt::format("H{}/{} d{} {}", entry.value("heads_q", 0), entry.value("heads_kv", 0),
                                    entry.value("head_dim", 0), entry.value("dtype", ""));
    if (entry.value("causal", false)) shape += " causal";
    const int seq_q = entry.value("seq_q", 0), seq_kv = entry.value("seq_kv", 0);
    const std::string seq = seq_q == seq_kv ? std::to_string(seq_q) : fmt::format("{}/{}", seq_q, seq_kv);
    const auto& search = entry.at("search");
    const std::string evaluations = std::to_string(search.value("evaluations", 0));
    const auto& best = search.at("best");
    if (best.is_null()) {
      table.add_spanning_row({backend, shape, seq}, "no batch: " + search.value("reason", std::string()));
      continue;
    }
    std::vector<std::string> cells = {backend,
                                      shape,
                                      seq,
                                      std::to_string(best.value("batch", 0)),
                                      report::format_si(number_at(best, "tokens_per_s").value_or(0)),
                                      report::format_ms(number_at(best, "p95_ms").value_or(0)),
                                      gib_cell(number_at(best, "memory_gib").value_or(0)),
                                      evaluations};
    if (any_stop) cells.push_back(stopped(search));
    if (const auto sweep = entry.find("exhaustive"); sweep != entry.end()) {
      const auto& sweep_best = sweep->at("best");
      if (sweep_best.is_null()) {
        cells.insert(cells.end(), {"–", "–", std::to_string(sweep->value("evaluations", 0)), "no sweep best"});
      } else {
        const bool agrees = sweep->value("agrees", false);
        cells.insert(cells.end(),
                     {std::to_string(sweep_best.value("batch", 0)),
                      report::format_si(number_at(sweep_best, "tokens_per_s").value_or(0)),
                      std::to_string(sweep->value("evaluations", 0)),
                      agrees ? fmt::format("yes ({:.1f}%)", 100 * sweep->value("search_vs_sweep", 1.0))
                             : fmt::format("NO ({:.1f}%)", 100 * sweep->value("search_vs_sweep", 1.0))});
      }
    }
    table.add_row(std::move(cells));
  }
  return table;
}

}  // namespace attnsuite::tune
