// Sinks: rows to CSV, JSON, Markdown and terminal tables, and the columns relative to vanilla.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/result.hpp"
#include "report/table.hpp"

namespace attnsuite::report {

// RFC 4180 CSV: header = result_columns(); cells with a comma, quote, CR or LF are quoted (quotes
// doubled); a missing value is an empty cell; numbers are written in their shortest form that
// reads back to the same double. Lines end in '\n'.
std::string to_csv(const std::vector<bench::ResultRow>& rows);

// {"header": {...}, "rows": [...]}.
nlohmann::json to_results_json(const bench::RunHeader& header, const std::vector<bench::ResultRow>& rows);
// The text of a results .json file: the same document, rows' keys in column order, indented.
std::string results_json_text(const bench::RunHeader& header, const std::vector<bench::ResultRow>& rows);

// One line per case, grouped by shape (groups in order of first appearance): shape, backend
// (peers by their display name), median and p95 ms, tokens/s, TFLOP/s, speedup and memory vs
// vanilla, peak extra MiB, rel-L1, cosine, status. Skipped and failed rows show their reason
// instead of numbers.
std::string summary_markdown(const std::vector<bench::ResultRow>& rows);
// The same table as aligned text for a terminal (box drawing, UTF-8).
std::string summary_terminal(const std::vector<bench::ResultRow>& rows);
// The table itself, for other renderings (HTML).
TextTable summary_table(const std::vector<bench::ResultRow>& rows);

// The profile of each ok row: shape, backend, FLOP/byte, TFLOP/s and % of the compute ceiling,
// GB/s and % of the memory ceiling, bottleneck, SM clock (mean / min), GPU utilization,
// allocated (peak extra) and reserved MiB. Grouped by shape like the summary.
TextTable profile_table(const std::vector<bench::ResultRow>& rows);
// Whether any row carries a profile figure (intensity, a ceiling share, a clock sample).
bool has_profile(const std::vector<bench::ResultRow>& rows);

// The vanilla backend that rows on a device are measured against: "cpu-vanilla" for "cpu",
// "cuda-vanilla" for "cuda:N"; empty for other devices.
std::string vanilla_backend_for(std::string_view device);

// For each ok row, finds the ok row of the same shape_key() on the same device whose backend is
// that device's vanilla, and sets speedup_vs_vanilla = vanilla.ms_median / row.ms_median and
// mem_vs_vanilla = row.peak_mem_mib / vanilla.peak_mem_mib, each only when both values are known
// and the divisor is > 0 (otherwise the field is left as it was).
void fill_relative_to_vanilla(std::vector<bench::ResultRow>& rows);

// Helpers for the tables, shared with compare.
std::string shape_summary(const bench::ResultRow& row);  // "B32 H16/16 N1024 d64 fp16 causal"
std::string backend_label(const bench::ResultRow& row);  // ours: registry name; peers: display name
std::string format_si(double value);                     // 7.06 M, 123 k, 950
std::string format_ms(double ms);                        // 3 significant digits, at most 4 decimals
std::string format_ratio(double ratio);                  // 12.1×, 1.00×, 0.853×

}  // namespace attnsuite::report
