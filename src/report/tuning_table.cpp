#include "report/tuning_table.hpp"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "report/sinks.hpp"

namespace attnsuite::report {

namespace {

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

TextTable tuning_table(const nlohmann::json& tuning) {
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
    if (const auto search = entry.find("search"); search != entry.end())
      any_stop = any_stop || !stopped(*search).empty();
  }
  std::vector<TableColumn> columns = {{"backend", Align::Left},      {"shape", Align::Left},
                                      {"seq len", Align::Right},     {"best batch", Align::Right},
                                      {"tokens/s", Align::Right},    {"p95 ms", Align::Right},
                                      {"peak memory", Align::Right}, {"evaluations", Align::Right}};
  if (any_stop) columns.push_back({"search stopped", Align::Left});
  if (any_sweep) {
    columns.push_back({"sweep best", Align::Right});
    columns.push_back({"sweep tokens/s", Align::Right});
    columns.push_back({"sweep evaluations", Align::Right});
    columns.push_back({"agrees", Align::Left});
  }
  TextTable table(std::move(columns));
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
                                      format_si(number_at(best, "tokens_per_s").value_or(0)),
                                      format_ms(number_at(best, "p95_ms").value_or(0)),
                                      gib_cell(number_at(best, "memory_gib").value_or(0)),
                                      evaluations};
    if (any_stop) cells.push_back(stopped(search));
    if (const auto sweep = entry.find("exhaustive"); sweep != entry.end()) {
      const auto& sweep_best = sweep->at("best");
      if (sweep_best.is_null()) {
        cells.insert(cells.end(), {"–", "–", std::to_string(sweep->value("evaluations", 0)), "no sweep best"});
      } else {
        const bool agrees = sweep->value("agrees", false);
        cells.insert(cells.end(), {std::to_string(sweep_best.value("batch", 0)),
                                   format_si(number_at(sweep_best, "tokens_per_s").value_or(0)),
                                   std::to_string(sweep->value("evaluations", 0)),
                                   agrees ? fmt::format("yes ({:.1f}%)", 100 * sweep->value("search_vs_sweep", 1.0))
                                          : fmt::format("NO ({:.1f}%)", 100 * sweep->value("search_vs_sweep", 1.0))});
      }
    }
    table.add_row(std::move(cells));
  }
  return table;
}

}  // namespace attnsuite::report
