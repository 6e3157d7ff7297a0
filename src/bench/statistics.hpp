// Sample statistics and the nvbench-style "repeat until the median is known well enough" loop.
#pragma once

#include <functional>
#include <vector>

namespace attnsuite::bench {

// Below 1% two measurements are the same whatever their noise says: clocks and layouts move
// that much between runs (docs/results/h200: the same case drifts 0.5-1% within one sweep).
inline constexpr double kMinRelativeChange = 0.01;

// The relative difference under which two measurements with relative spreads `spread_a` and
// `spread_b` are the same: 2·√(a² + b²), and never under `floor`. `attnsuite compare`, the
// kernel-config tuner and the batch tuner all judge "the same" by this.
double same_within(double spread_a, double spread_b, double floor = kMinRelativeChange);

struct Statistics {
  int count = 0;
  double min = 0, max = 0, mean = 0, median = 0, p05 = 0, p95 = 0, stddev = 0;
  // Standard error of the median relative to it: 1.2533·σ/(√n·median), the large-sample
  // result for a normal population. Infinity with fewer than two samples.
  double relative_median_error() const;
};

// Percentiles interpolate linearly between order statistics (numpy's default).
Statistics summarize(std::vector<double> samples);

struct MeasureOptions {
  int warmup_reps = 1;     // at least this many unmeasured runs ...
  double warmup_ms = 0.0;  // ... and at least this long
  int min_reps = 5;        // never stop before this many samples
  int max_reps = 10000;
  double noise_target = 0.01;   // stop when relative_median_error() falls under this ...
  double min_time_ms = 0.0;     // ... once the samples add up to at least this
  double max_time_ms = 2000.0;  // the time budget: stop when the samples add up to this
  double timeout_ms = 30000.0;  // wall-clock safety net, warm-up and cache flushes included
};

struct Measurement {
  std::vector<double> samples_ms;
  Statistics stats;
  bool converged = false;  // the noise target was reached (false: budget or max_reps ended it)
};

// Calls run_warmup() and then sample_ms() (which runs once and returns the measured time)
// until the stopping rule holds. `cancelled` (optional) is polled between samples; when it
// returns true the loop stops early and the measurement is returned as it stands.
Measurement measure(const std::function<void()>& run_warmup, const std::function<double()>& sample_ms,
                    const MeasureOptions& options, const std::function<bool()>& cancelled = {});

}  // namespace attnsuite::bench
