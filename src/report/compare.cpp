#include "report/compare.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "bench/statistics.hpp"
#include "core/enum_names.hpp"
#include "report/sinks.hpp"
#include "report/table.hpp"

namespace attnsuite::report {

namespace {

using bench::CaseStatus;
using bench::ResultRow;

// 1.645 is the 95th percentile of a standard normal: p95 − p05 spans 2·1.645 σ.
constexpr double kP05ToP95Sigmas = 2 * 1.645;
constexpr double kAccuracyGrowth = 2.0;
constexpr double kAccuracyFloor = 1e-6;

// Unique keys in first-appearance order; the last row of a key wins.
struct IndexedRun {
  std::vector<std::string> order;
  std::unordered_map<std::string, const ResultRow*> by_key;
};

IndexedRun index_run(const std::vector<ResultRow>& rows) {
  IndexedRun run;
  for (const ResultRow& row : rows) {
    std::string key = row.case_key();
    auto [it, inserted] = run.by_key.insert_or_assign(key, &row);
    if (inserted) run.order.push_back(std::move(key));
  }
  return run;
}

std::string label_of(const ResultRow& row) { return backend_label(row) + " " + shape_summary(row); }

std::string side_problem(std::string_view side, const ResultRow& row) {
  if (row.status != CaseStatus::Ok) {
    std::string text = fmt::format("{} {}", side, bench::to_string(row.status));
    if (!row.reason.empty()) text += ": " + row.reason;
    return text;
  }
  return fmt::format("{} has no median", side);
}

void judge(ComparedCase& compared) {
  const ResultRow& a = *compared.a;
  const ResultRow& b = *compared.b;
  const bool a_ok = a.status == CaseStatus::Ok && a.ms_median && *a.ms_median > 0;
  const bool b_ok = b.status == CaseStatus::Ok && b.ms_median && *b.ms_median > 0;
  if (!a_ok || !b_ok) {
    compared.verdict = Verdict::NotComparable;
    if (!a_ok && !b_ok && a.status == b.status && a.reason == b.reason) {
      compared.note = side_problem("both", a);
      return;
    }
    std::vector<std::string> problems;
    if (!a_ok) problems.push_back(side_problem("A", a));
    if (!b_ok) problems.push_back(side_problem("B", b));
    compared.note = fmt::format("{}", fmt::join(problems, "; "));
    return;
  }
  const double ratio = *a.ms_median / *b.ms_median;
  const double spread_a = relative_spread(a).value_or(0.0);
  const double spread_b = relative_spread(b).value_or(0.0);
  compared.ratio = ratio;
  compared.noise = std::sqrt(spread_a * spread_a + spread_b * spread_b);
  const double threshold = bench::same_within(spread_a, spread_b);
  compared.verdict = ratio > 1 + threshold ? Verdict::Faster : ratio < 1 - threshold ? Verdict::Slower : Verdict::Same;

  if (a.rel_l1 && b.rel_l1) {
    const double before = *a.rel_l1;
    const double after = *b.rel_l1;
    const bool became_nonfinite = std::isfinite(before) && !std::isfinite(after);
    if (became_nonfinite || (after > kAccuracyGrowth * before && after > kAccuracyFloor)) {
      compared.accuracy_worse = true;
      compared.note = fmt::format("accuracy worse: rel-L1 {:.2e} → {:.2e}", before, after);
    }
  }
}

std::string ms_cell(const std::optional<ResultRow>& row) {
  if (!row) return {};
  if (row->status != CaseStatus::Ok) return std::string(bench::to_string(row->status));
  return row->ms_median ? format_ms(*row->ms_median) : std::string("–");
}

std::string verdict_cell(const ComparedCase& compared) {
  std::string text(to_string(compared.verdict));
  if (!compared.note.empty()) text += " (" + compared.note + ")";
  return text;
}

constexpr EnumName<Verdict> kVerdictNames[] = {
    {Verdict::Faster, "faster"},     {Verdict::Slower, "slower"},
    {Verdict::Same, "same"},         {Verdict::NotComparable, "not comparable"},
    {Verdict::OnlyInA, "only in A"}, {Verdict::OnlyInB, "only in B"}};
}  // namespace

std::string_view to_string(Verdict verdict) { return name_of(kVerdictNames, verdict, "unknown"); }

std::optional<double> relative_spread(const ResultRow& row) {
  if (!row.ms_median || !(*row.ms_median > 0)) return std::nullopt;
  if (row.ms_stddev) return *row.ms_stddev / *row.ms_median;
  if (row.ms_p05 && row.ms_p95) return (*row.ms_p95 - *row.ms_p05) / (kP05ToP95Sigmas * *row.ms_median);
  return std::nullopt;
}

Comparison compare_runs(const std::vector<ResultRow>& a, const std::vector<ResultRow>& b) {
  const IndexedRun run_a = index_run(a);
  const IndexedRun run_b = index_run(b);
  Comparison result;

  for (const std::string& key : run_a.order) {
    ComparedCase compared;
    compared.case_key = key;
    compared.a = *run_a.by_key.at(key);
    compared.label = label_of(*compared.a);
    if (const auto found = run_b.by_key.find(key); found != run_b.by_key.end()) {
      compared.b = *found->second;
      judge(compared);
    } else {
      compared.verdict = Verdict::OnlyInA;
    }
    result.cases.push_back(std::move(compared));
  }
  for (const std::string& key : run_b.order) {
    if (run_a.by_key.contains(key)) continue;
    ComparedCase compared;
    compared.case_key = key;
    compared.b = *run_b.by_key.at(key);
    compared.label = label_of(*compared.b);
    compared.verdict = Verdict::OnlyInB;
    result.cases.push_back(std::move(compared));
  }

  TextTable table({{"case", Align::Left},
                   {"A ms", Align::Right},
                   {"B ms", Align::Right},
                   {"ratio", Align::Right},
                   {"noise ±", Align::Right},
                   {"verdict", Align::Left, 60}});
  for (const ComparedCase& compared : result.cases) {
    table.add_row({compared.label, ms_cell(compared.a), ms_cell(compared.b),
                   compared.ratio ? format_ratio(*compared.ratio) : std::string(),
                   compared.ratio ? fmt::format("{:.1f}%", 100 * compared.noise) : std::string(),
                   verdict_cell(compared)});
  }
  const auto count = [&](Verdict verdict) {
    return static_cast<int>(std::ranges::count(result.cases, verdict, &ComparedCase::verdict));
  };
  result.faster = count(Verdict::Faster);
  result.slower = count(Verdict::Slower);
  result.same = count(Verdict::Same);
  result.not_comparable = count(Verdict::NotComparable);
  result.only_in_a = count(Verdict::OnlyInA);
  result.only_in_b = count(Verdict::OnlyInB);
  result.accuracy_worse = static_cast<int>(std::ranges::count(result.cases, true, &ComparedCase::accuracy_worse));
  const std::string counts = fmt::format(
      "{} faster, {} slower, {} same, {} not comparable, {} only in A, {} only in B; {} with "
      "worse accuracy (ratio = A ms / B ms: > 1 means B is faster)",
      result.faster, result.slower, result.same, result.not_comparable, result.only_in_a, result.only_in_b,
      result.accuracy_worse);
  result.markdown = table.markdown() + "\n" + counts + "\n";
  result.terminal = table.terminal() + counts + "\n";
  result.html = table.html() + "<p>" + escape_html(counts) + "</p>\n";
  return result;
}

}  // namespace attnsuite::report
