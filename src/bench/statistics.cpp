#include "bench/statistics.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/cancel.hpp"

namespace attnsuite::bench {

double Statistics::relative_median_error() const {
  if (count < 2 || median <= 0.0) return std::numeric_limits<double>::infinity();
  return 1.2533141373155001 * stddev / (std::sqrt(static_cast<double>(count)) * median);
}

double same_within(double spread_a, double spread_b, double floor) {
  return std::max(2 * std::sqrt(spread_a * spread_a + spread_b * spread_b), floor);
}

namespace {
double percentile(const std::vector<double>& sorted, double fraction) {
  const double position = fraction * static_cast<double>(sorted.size() - 1);
  const auto lower = static_cast<std::size_t>(std::floor(position));
  const std::size_t upper = std::min(lower + 1, sorted.size() - 1);
  const double weight = position - static_cast<double>(lower);
  return sorted[lower] * (1.0 - weight) + sorted[upper] * weight;
}
}  // namespace

Statistics summarize(std::vector<double> samples) {
  Statistics s;
  s.count = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.min = samples.front();
  s.max = samples.back();
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / s.count;
  s.median = percentile(samples, 0.5);
  s.p05 = percentile(samples, 0.05);
  s.p95 = percentile(samples, 0.95);
  double sum_sq = 0.0;
  for (double x : samples) sum_sq += (x - s.mean) * (x - s.mean);
  s.stddev = s.count > 1 ? std::sqrt(sum_sq / (s.count - 1)) : 0.0;
  return s;
}

Measurement measure(const std::function<void()>& run_warmup, const std::function<double()>& sample_ms,
                    const MeasureOptions& options, const std::function<bool()>& cancelled) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  auto wall_ms = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - started).count(); };

  // The caller's check, and the cancel flag where the caller is cancellable (core/cancel.hpp):
  // one sample of a large CPU case takes seconds, and the flag also stops it from inside.
  const auto stop = [&] { return (cancellable_here() && cancel_requested()) || (cancelled && cancelled()); };
  for (int rep = 0; rep < options.warmup_reps || wall_ms() < options.warmup_ms; ++rep) {
    if (stop() || wall_ms() > options.timeout_ms) break;
    run_warmup();
  }

  Measurement m;
  double total_ms = 0.0;
  while (static_cast<int>(m.samples_ms.size()) < options.max_reps) {
    if (stop()) break;
    const double t = sample_ms();
    m.samples_ms.push_back(t);
    total_ms += t;
    const int n = static_cast<int>(m.samples_ms.size());
    if (n < options.min_reps) {
      if (wall_ms() > options.timeout_ms) break;
      continue;
    }
    m.stats = summarize(m.samples_ms);
    if (m.stats.relative_median_error() < options.noise_target && total_ms >= options.min_time_ms) {
      m.converged = true;
      break;
    }
    if (total_ms >= options.max_time_ms || wall_ms() > options.timeout_ms) break;
  }
  m.stats = summarize(m.samples_ms);
  return m;
}

}  // namespace attnsuite::bench
