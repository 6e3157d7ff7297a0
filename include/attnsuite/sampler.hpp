// A thread that samples a device's SM clock and utilization while a case is timed (NVML on a
// GPU), so a row says what clock it ran at, not only what clock it started at.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace attnsuite::bench {

// One reading; a value <= 0 (clock) or < 0 (utilization) is "unknown" and left out.
struct DeviceSample {
  double sm_clock_mhz = 0;
  double gpu_util_pct = -1;
};

struct SampleSummary {
  int samples = 0;  // readings taken, known values or not
  std::optional<double> clock_mhz_mean, clock_mhz_min, gpu_util_pct_mean;
};

class PeriodicSampler {
 public:
  // Reads once at once, then every `period` on its own thread until stop().
  PeriodicSampler(std::function<DeviceSample()> read, std::chrono::microseconds period);
  ~PeriodicSampler();
  PeriodicSampler(const PeriodicSampler&) = delete;
  PeriodicSampler& operator=(const PeriodicSampler&) = delete;

  // Takes a last reading (so a case shorter than the period has two), joins the thread and
  // summarizes. Later calls return the same summary.
  SampleSummary stop();

 private:
  void loop();

  std::function<DeviceSample()> read_;
  std::chrono::microseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<DeviceSample> samples_;
  std::optional<SampleSummary> summary_;
  std::thread thread_;
};

// Summary of readings: mean and minimum of the known clocks, mean of the known utilizations.
SampleSummary summarize_samples(const std::vector<DeviceSample>& samples);

}  // namespace attnsuite::bench
