#include "attnsuite/device_context.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "attnsuite/error.hpp"
#include "attnsuite/memory.hpp"
#include "core/host_info.hpp"

#if ATTNSUITE_HAVE_CUDA
#include "cuda/cuda_backends.hpp"
#endif

namespace attnsuite::bench {

namespace {
// Baselines live per tracker, so reset/peak pairs work for any context of that device.
std::size_t& baseline_for(Device device) {
  static std::size_t cpu = 0, cuda[MemoryTracker::kMaxCudaDevices] = {};
  return device.type == DeviceType::Cpu ? cpu : cuda[device.index];
}
}  // namespace

void DeviceContext::reset_peak_memory() {
  auto& tracker = MemoryTracker::for_device(device().type, device().index);
  tracker.reset_peak();
  baseline_for(device()) = tracker.current();
}

std::size_t DeviceContext::peak_memory_since_reset() {
  const auto& tracker = MemoryTracker::for_device(device().type, device().index);
  const std::size_t baseline = baseline_for(device());
  return tracker.peak() > baseline ? tracker.peak() - baseline : 0;
}

namespace {

class CpuTimer final : public Timer {
 public:
  void start() override { start_ = Clock::now(); }
  void stop() override { stop_ = Clock::now(); }
  double elapsed_ms() override { return std::chrono::duration<double, std::milli>(stop_ - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_, stop_;
};

class CpuContext final : public DeviceContext {
 public:
  Device device() const override { return {DeviceType::Cpu, 0}; }
  std::string device_name() const override { return host_info().cpu_model; }
  std::unique_ptr<DeviceAllocation> allocate(std::size_t bytes) override {
    return std::make_unique<BufferAllocation<HostBuffer>>(bytes);
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void poison(void* dst, std::size_t bytes) override { std::memset(dst, 0xff, bytes); }
  Stream stream() override { return nullptr; }
  void synchronize() override {}
  // Writing a buffer twice the size of the last-level cache evicts the inputs from it.
  // Untracked on purpose: the flush buffer is the harness's memory, not the backend's.
  void flush_cache() override {
    if (flush_buffer_.empty())
      flush_buffer_.resize(2 * std::max<std::size_t>(host_info().llc_bytes, std::size_t{8} << 20));
    std::memset(flush_buffer_.data(), ++flush_value_, flush_buffer_.size());
  }
  std::unique_ptr<Timer> make_timer() override { return std::make_unique<CpuTimer>(); }
  std::size_t free_bytes() override { return host_info().available_memory_bytes(); }

 private:
  std::vector<unsigned char> flush_buffer_;
  unsigned char flush_value_ = 0;
};

}  // namespace

std::unique_ptr<DeviceContext> make_cpu_context() { return std::make_unique<CpuContext>(); }

std::unique_ptr<DeviceContext> make_device_context(Device device) {
  if (device.type == DeviceType::Cpu) return make_cpu_context();
#if ATTNSUITE_HAVE_CUDA
  return cuda::make_cuda_context(device.index);
#else
  throw Error(ErrorKind::Unsupported,
              "this build of attnsuite has no CUDA support (configured with ATTNSUITE_CUDA=OFF or without nvcc)");
#endif
}

}  // namespace attnsuite::bench
