#include "cuda/common/device_buffer.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "attnsuite/error.hpp"
#include "attnsuite/memory.hpp"
#include "cuda/common/check.hpp"

namespace attnsuite::cuda {

DeviceBuffer::DeviceBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  const cudaError_t status = ATTNSUITE_CUDA_FAULT_POINT(cudaMalloc(&data_, bytes));
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    data_ = nullptr;
    throw Error(ErrorKind::OutOfMemory,
                fmt::format("out of device memory: could not allocate {:.1f} MiB ({:.1f} MiB free of {:.1f} MiB)",
                            bytes / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0));
  }
  ATTNSUITE_CUDA_CHECK_STATUS(status);
  bytes_ = bytes;
  // Not a checked call (each checked call is a fault-injection point, counted by the tests).
  if (cudaGetDevice(&device_) != cudaSuccess) device_ = 0;
  MemoryTracker::for_device(DeviceType::Cuda, device_).on_alloc(bytes_);
}

void DeviceBuffer::release() noexcept {
  if (data_ == nullptr) return;
  MemoryTracker::for_device(DeviceType::Cuda, device_).on_free(bytes_);
  // A buffer held by a backend in the global registry is freed after main() returns, when the
  // CUDA runtime may already be unloading: the driver frees the memory with the context then,
  // so that one status is not an error (it printed "driver shutting down" at every exit).
  if (const cudaError_t status = cudaFree(data_); status == cudaErrorCudartUnloading) {
    cudaGetLastError();
  } else {
    ::attnsuite::cuda::detail::check_nothrow(status, "cudaFree(data_)", __FILE__, __LINE__);
  }
  data_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), device_(other.device_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

}  // namespace attnsuite::cuda
