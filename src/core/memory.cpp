#include "attnsuite/memory.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <new>

#include "attnsuite/error.hpp"
#include "core/host_info.hpp"
#include "fault/fault.hpp"

namespace attnsuite {

MemoryTracker& MemoryTracker::for_device(DeviceType type, int index) {
  static MemoryTracker cpu;
  static MemoryTracker cuda[kMaxCudaDevices];
  if (type == DeviceType::Cpu) return cpu;
  ATTNSUITE_CHECK(index >= 0 && index < kMaxCudaDevices, ErrorKind::Internal,
                  fmt::format("CUDA device index {} outside 0..{}", index, kMaxCudaDevices - 1));
  return cuda[index];
}

void MemoryTracker::on_alloc(std::size_t bytes) {
  const std::size_t now = current_.fetch_add(bytes) + bytes;
  std::size_t seen = peak_.load();
  while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
  }
}

void MemoryTracker::on_free(std::size_t bytes) { current_.fetch_sub(bytes); }

HostBuffer::HostBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  if (const std::uint64_t event = fault::fail_here(fault::Site::HostAlloc); event != 0) {
    bytes_ = 0;
    throw Error(ErrorKind::OutOfMemory,
                fmt::format("out of host memory: allocation #{} ({:.2f} MiB) failed (fault injected by "
                            "ATTNSUITE_FAULT=alloc:{})",
                            event, bytes / 1048576.0, event));
  }
  // Linux overcommits: a buffer larger than the free memory would "succeed" and the process
  // would be killed when it is touched. Refuse it up front with the numbers instead.
  if (bytes > (std::size_t{256} << 20)) {
    const std::size_t available = host_info().available_memory_bytes();
    if (available > 0 && bytes > available) {
      bytes_ = 0;
      throw Error(ErrorKind::OutOfMemory, fmt::format("out of host memory: needs {:.2f} GiB, {:.2f} GiB free",
                                                      bytes / 1073741824.0, available / 1073741824.0));
    }
  }
  constexpr std::size_t kAlign = 64;
  data_ = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (data_ == nullptr) {
    bytes_ = 0;
    throw Error(ErrorKind::OutOfMemory,
                fmt::format("out of host memory: could not allocate {:.1f} MiB", bytes / 1048576.0));
  }
  MemoryTracker::for_device(DeviceType::Cpu).on_alloc(bytes_);
}

HostBuffer::~HostBuffer() {
  if (data_ != nullptr) {
    MemoryTracker::for_device(DeviceType::Cpu).on_free(bytes_);
    std::free(data_);
  }
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    this->~HostBuffer();
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

}  // namespace attnsuite
