// Tracking allocation: every buffer a backend allocates goes through here, so the harness can
// report its peak extra memory per device.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "attnsuite/tensor.hpp"

namespace attnsuite {

class MemoryTracker {
 public:
  // One tracker per device: CUDA devices by index (0..kMaxCudaDevices-1), so that workers
  // on several GPUs at once (bench --gpus) each see only their own device's allocations.
  static constexpr int kMaxCudaDevices = 64;
  static MemoryTracker& for_device(DeviceType type, int index = 0);

  void on_alloc(std::size_t bytes);
  void on_free(std::size_t bytes);
  std::size_t current() const { return current_.load(); }
  std::size_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
};

// 64-byte aligned host buffer counted by the CPU tracker. Move-only.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::size_t bytes);
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace attnsuite
