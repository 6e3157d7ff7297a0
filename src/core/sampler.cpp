#include "attnsuite/sampler.hpp"

#include <algorithm>

namespace attnsuite::bench {

SampleSummary summarize_samples(const std::vector<DeviceSample>& samples) {
  SampleSummary summary;
  summary.samples = static_cast<int>(samples.size());
  double clock_sum = 0, util_sum = 0;
  int clocks = 0, utils = 0;
  for (const DeviceSample& s : samples) {
    if (s.sm_clock_mhz > 0) {
      clock_sum += s.sm_clock_mhz;
      summary.clock_mhz_min = std::min(summary.clock_mhz_min.value_or(s.sm_clock_mhz), s.sm_clock_mhz);
      ++clocks;
    }
    if (s.gpu_util_pct >= 0) {
      util_sum += s.gpu_util_pct;
      ++utils;
    }
  }
  if (clocks > 0) summary.clock_mhz_mean = clock_sum / clocks;
  if (utils > 0) summary.gpu_util_pct_mean = util_sum / utils;
  return summary;
}

PeriodicSampler::PeriodicSampler(std::function<DeviceSample()> read, std::chrono::microseconds period)
    : read_(std::move(read)), period_(period) {
  samples_.push_back(read_());
  thread_ = std::thread([this] { loop(); });
}

PeriodicSampler::~PeriodicSampler() { stop(); }

void PeriodicSampler::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    const DeviceSample sample = read_();  // outside the lock: an NVML call takes tens of µs
    lock.lock();
    samples_.push_back(sample);
  }
}

SampleSummary PeriodicSampler::stop() {
  if (summary_) return *summary_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  samples_.push_back(read_());
  summary_ = summarize_samples(samples_);
  return *summary_;
}

}  // namespace attnsuite::bench
