// Run A (baseline) against run B: which cases got faster, slower, or stayed within the noise.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/result.hpp"

namespace attnsuite::report {

enum class Verdict {
  Faster,         // B is faster than A beyond the noise
  Slower,         // B is slower than A beyond the noise
  Same,           // within the noise (or within 1%)
  NotComparable,  // matched, but a side is not ok or has no median
  OnlyInA,
  OnlyInB,
};
std::string_view to_string(Verdict verdict);  // "faster", "slower", "same", "not comparable", "only in A", "only in B"

struct ComparedCase {
  std::string case_key;
  std::string label;  // "cpu-flash B32 H16/16 N1024 d64 fp16"
  std::optional<bench::ResultRow> a, b;
  std::optional<double> ratio;  // A.ms_median / B.ms_median: > 1 means B is faster
  double noise = 0;             // combined relative spread, sqrt(a² + b²); 0 when unknown
  Verdict verdict = Verdict::Same;
  bool accuracy_worse = false;  // B's rel-L1 is > 2× A's and above 1e-6 (or became non-finite)
  std::string note;             // why not comparable; the accuracy change
};

struct Comparison {
  std::vector<ComparedCase> cases;  // A's order, then the cases only in B in B's order
  int faster = 0, slower = 0, same = 0, not_comparable = 0, only_in_a = 0, only_in_b = 0;
  int accuracy_worse = 0;
  // Columns: case, A ms, B ms, ratio, noise ±%, verdict; then a line with the counts.
  std::string markdown;
  std::string terminal;
  std::string html;
};

// A side's relative spread: ms_stddev / ms_median, or when there is no stddev the p05..p95 range
// as a normal's: (p95 − p05) / (2·1.645·median); nullopt when neither is known.
std::optional<double> relative_spread(const bench::ResultRow& row);

// Matches rows by case_key() (when a key repeats within a run, the later row wins: a re-run).
// Verdict for ok pairs: faster if ratio > 1 + t, slower if ratio < 1 − t, else same, where
// t = max(2·noise, 0.01).
Comparison compare_runs(const std::vector<bench::ResultRow>& a, const std::vector<bench::ResultRow>& b);

}  // namespace attnsuite::report
