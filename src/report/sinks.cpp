#include "report/sinks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "report/table.hpp"

namespace attnsuite::report {

namespace {

using bench::CaseStatus;
using bench::ResultRow;

bool needs_quotes(std::string_view text) {
  return text.find_first_of(",\"\r\n") != std::string_view::npos ||
         (!text.empty() && (text.front() == ' ' || text.back() == ' '));
}

void append_csv_cell(std::string& out, std::string_view text) {
  if (!needs_quotes(text)) {
    out += text;
    return;
  }
  out += '"';
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

std::string csv_cell(const nlohmann::ordered_json& value) {
  if (value.is_null()) return {};
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_unsigned()) return fmt::format("{}", value.get<std::uint64_t>());
  if (value.is_number_integer()) return fmt::format("{}", value.get<std::int64_t>());
  // fmt's default for double is the shortest text that reads back to the same value.
  return fmt::format("{}", value.get<double>());
}

// Fixed-point with 3 significant digits; scientific outside [1e-4, 1e7).
std::string significant3(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return "0";
  const double magnitude = std::fabs(value);
  if (magnitude < 1e-4 || magnitude >= 1e7) return fmt::format("{:.2e}", value);
  int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(magnitude))));
  // 9.996 rounds to 10.0, which needs one decimal fewer.
  const double scale = std::pow(10.0, decimals);
  if (decimals > 0 && std::round(magnitude * scale) / scale >= std::pow(10.0, 3 - decimals)) {
    --decimals;
  }
  return fmt::format("{:.{}f}", value, decimals);
}

std::string format_percent(double ratio) {
  const double percent = ratio * 100.0;
  if (!std::isfinite(percent)) return significant3(percent);
  if (std::fabs(percent) >= 9.95) return fmt::format("{:.0f}%", percent);
  if (std::fabs(percent) >= 0.995) return fmt::format("{:.1f}%", percent);
  return fmt::format("{:.2f}%", percent);
}

std::string format_error(double value) {
  if (!std::isfinite(value)) return significant3(value);
  return value == 0 ? "0" : fmt::format("{:.2e}", value);
}

std::string format_cos(double value) {
  if (!std::isfinite(value)) return significant3(value);
  return fmt::format("{:.6f}", value);
}

constexpr std::string_view kMissing = "–";

template <class Format>
std::string cell(const std::optional<double>& value, Format format) {
  return value ? format(*value) : std::string(kMissing);
}

// Groups by shape in order of first appearance; rows keep their order within a group.
std::vector<std::vector<const ResultRow*>> by_shape(const std::vector<ResultRow>& rows) {
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<const ResultRow*>> groups;
  for (const ResultRow& row : rows) {
    auto [it, inserted] = groups.try_emplace(row.shape_key());
    if (inserted) order.push_back(it->first);
    it->second.push_back(&row);
  }
  std::vector<std::vector<const ResultRow*>> out;
  for (const std::string& key : order) out.push_back(std::move(groups[key]));
  return out;
}

std::string status_text(const ResultRow& row) {
  std::string text(bench::to_string(row.status));
  if (!row.reason.empty()) text += ": " + row.reason;
  return text;
}

}  // namespace

TextTable summary_table(const std::vector<ResultRow>& rows) {
  TextTable table({{"shape", Align::Left},
                   {"backend", Align::Left},
                   {"median ms", Align::Right},
                   {"p95 ms", Align::Right},
                   {"tokens/s", Align::Right},
                   {"TFLOP/s", Align::Right},
                   {"vs vanilla", Align::Right},
                   {"peak MiB", Align::Right},
                   {"mem vs vanilla", Align::Right},
                   {"rel-L1", Align::Right},
                   {"cos", Align::Right},
                   {"status", Align::Left, 60}});
  table.set_collapse_repeats(0);
  for (const auto& group : by_shape(rows)) {
    for (const ResultRow* row : group) {
      const std::string shape = shape_summary(*row);
      if (row->status != CaseStatus::Ok) {
        table.add_spanning_row({shape, backend_label(*row)}, status_text(*row));
        continue;
      }
      table.add_row({shape, backend_label(*row), cell(row->ms_median, format_ms), cell(row->ms_p95, format_ms),
                     cell(row->tokens_per_s, format_si), cell(row->tflops, significant3),
                     cell(row->speedup_vs_vanilla, format_ratio), cell(row->peak_mem_mib, significant3),
                     cell(row->mem_vs_vanilla, format_percent), cell(row->rel_l1, format_error),
                     cell(row->cos_sim, format_cos), status_text(*row)});
    }
    table.add_separator();
  }
  return table;
}

bool has_profile(const std::vector<ResultRow>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const ResultRow& r) {
    return r.intensity || r.compute_ceiling_pct || r.memory_ceiling_pct || r.clock_mhz || r.mem_reserved_mib;
  });
}

TextTable profile_table(const std::vector<ResultRow>& rows) {
  TextTable table({{"shape", Align::Left},
                   {"backend", Align::Left},
                   {"FLOP/byte", Align::Right},
                   {"TFLOP/s", Align::Right},
                   {"% compute", Align::Right},
                   {"GB/s", Align::Right},
                   {"% memory", Align::Right},
                   {"bottleneck", Align::Left},
                   {"SM MHz mean/min", Align::Right},
                   {"GPU util", Align::Right},
                   {"alloc MiB", Align::Right},
                   {"reserved MiB", Align::Right}});
  table.set_collapse_repeats(0);
  const auto percent = [](double value) { return significant3(value) + "%"; };
  for (const auto& group : by_shape(rows)) {
    bool any = false;
    for (const ResultRow* row : group) {
      if (row->status != CaseStatus::Ok) continue;
      any = true;
      std::string clock = cell(row->clock_mhz, [](double v) { return fmt::format("{:.0f}", v); });
      if (row->clock_mhz_min) clock += fmt::format(" / {:.0f}", *row->clock_mhz_min);
      table.add_row({shape_summary(*row), backend_label(*row), cell(row->intensity, significant3),
                     cell(row->tflops, significant3), cell(row->compute_ceiling_pct, percent),
                     cell(row->gbps, significant3), cell(row->memory_ceiling_pct, percent),
                     row->bottleneck.empty() ? std::string(kMissing) : row->bottleneck, clock,
                     cell(row->gpu_util_pct, [](double v) { return fmt::format("{:.0f}%", v); }),
                     cell(row->peak_mem_mib, significant3), cell(row->mem_reserved_mib, significant3)});
    }
    if (any) table.add_separator();
  }
  return table;
}

std::string to_csv(const std::vector<ResultRow>& rows) {
  const auto& columns = bench::result_columns();
  std::string out;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (c > 0) out += ',';
    append_csv_cell(out, columns[c]);
  }
  out += '\n';
  for (const ResultRow& row : rows) {
    const nlohmann::ordered_json values = bench::to_ordered_json(row);
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (c > 0) out += ',';
      append_csv_cell(out, csv_cell(values.at(columns[c])));
    }
    out += '\n';
  }
  return out;
}

nlohmann::json to_results_json(const bench::RunHeader& header, const std::vector<ResultRow>& rows) {
  nlohmann::json out{{"header", bench::to_json(header)}, {"rows", nlohmann::json::array()}};
  for (const ResultRow& row : rows) out["rows"].push_back(bench::to_json(row));
  return out;
}

std::string results_json_text(const bench::RunHeader& header, const std::vector<ResultRow>& rows) {
  nlohmann::ordered_json out;
  out["header"] = nlohmann::ordered_json(bench::to_json(header));
  out["rows"] = nlohmann::ordered_json::array();
  for (const ResultRow& row : rows) out["rows"].push_back(bench::to_ordered_json(row));
  return out.dump(2) + "\n";
}

std::string summary_markdown(const std::vector<ResultRow>& rows) { return summary_table(rows).markdown(); }

std::string summary_terminal(const std::vector<ResultRow>& rows) { return summary_table(rows).terminal(); }

std::string vanilla_backend_for(std::string_view device) {
  if (device == "cpu") return "cpu-vanilla";
  if (device == "cuda" || device.starts_with("cuda:")) return "cuda-vanilla";
  return {};
}

void fill_relative_to_vanilla(std::vector<ResultRow>& rows) {
  // (shape, device) → the vanilla row measured there.
  std::map<std::pair<std::string, std::string>, const ResultRow*> vanillas;
  for (const ResultRow& row : rows) {
    if (row.status == CaseStatus::Ok && row.backend == vanilla_backend_for(row.device)) {
      vanillas.try_emplace({row.shape_key(), row.device}, &row);
    }
  }
  // Copy the vanilla values first: the vanilla row itself is updated in the loop.
  struct Reference {
    std::optional<double> ms_median, peak_mem_mib;
  };
  std::map<std::pair<std::string, std::string>, Reference> references;
  for (const auto& [key, row] : vanillas) references[key] = {row->ms_median, row->peak_mem_mib};

  for (ResultRow& row : rows) {
    if (row.status != CaseStatus::Ok) continue;
    const auto found = references.find({row.shape_key(), row.device});
    if (found == references.end()) continue;
    const Reference& vanilla = found->second;
    if (vanilla.ms_median && row.ms_median && *vanilla.ms_median > 0 && *row.ms_median > 0) {
      row.speedup_vs_vanilla = *vanilla.ms_median / *row.ms_median;
    }
    if (vanilla.peak_mem_mib && row.peak_mem_mib && *vanilla.peak_mem_mib > 0) {
      row.mem_vs_vanilla = *row.peak_mem_mib / *vanilla.peak_mem_mib;
    }
  }
}

std::string shape_summary(const ResultRow& row) {
  std::string text = fmt::format("B{} H{}/{} ", row.batch, row.heads_q, row.heads_kv);
  text += row.seq_q == row.seq_kv ? fmt::format("N{}", row.seq_q) : fmt::format("N{}/{}", row.seq_q, row.seq_kv);
  text += fmt::format(" d{} {}", row.head_dim, row.dtype);
  if (row.causal) text += " causal";
  if (row.window_left >= 0 || row.window_right >= 0) {
    const auto side = [](int w) { return w >= 0 ? std::to_string(w) : std::string("∞"); };
    text += fmt::format(" window {},{}", side(row.window_left), side(row.window_right));
  }
  if (!row.layout.empty() && row.layout != "bshd" && row.layout != "BSHD") text += " " + row.layout;
  if (!row.generator.empty() && row.generator != "randn") text += " " + row.generator;
  return text;
}

std::string backend_label(const ResultRow& row) {
  if (!row.peer_of.empty() && !row.display_name.empty()) return row.display_name;
  return row.backend;
}

std::string format_si(double value) {
  if (!std::isfinite(value)) return significant3(value);
  static constexpr std::pair<double, const char*> kPrefixes[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& [scale, prefix] : kPrefixes) {
    // 999.7 k prints as 1.00 M, not 1000 k.
    if (std::fabs(value) >= scale * 0.9995) return significant3(value / scale) + " " + prefix;
  }
  return significant3(value);
}

std::string format_ms(double ms) { return significant3(ms); }

std::string format_ratio(double ratio) { return significant3(ratio) + "×"; }

}  // namespace attnsuite::report
