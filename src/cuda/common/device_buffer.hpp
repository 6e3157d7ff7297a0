// A cudaMalloc'ed buffer counted in MemoryTracker::for_device(DeviceType::Cuda, its device), so that the
// harness sees each backend's extra device memory (vanilla's N² scores above all). Move-only.
#pragma once

#include <cstddef>

namespace attnsuite::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // On the current device. Throws Error(OutOfMemory) with the size and the free memory.
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;  // the device it was allocated on, whose tracker counts it
};

}  // namespace attnsuite::cuda
