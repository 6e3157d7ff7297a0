// bench::DeviceContext for a CUDA device: what the runner uses to allocate, copy, poison,
// flush the L2 and time on a GPU without knowing it is one.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/common/generate.hpp"
#include "cuda/common/nvml.hpp"
#include "cuda/cuda_backends.hpp"

namespace attnsuite::cuda {
namespace {

class EventTimer final : public bench::Timer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {
    ATTNSUITE_CUDA_CHECK(cudaEventCreate(&start_));
    const cudaError_t status = ATTNSUITE_CUDA_FAULT_POINT(cudaEventCreate(&stop_));
    if (status != cudaSuccess) cudaEventDestroy(start_);
    ATTNSUITE_CUDA_CHECK_STATUS(status);
  }
  ~EventTimer() override {
    ATTNSUITE_CUDA_CHECK_NOTHROW(cudaEventDestroy(start_));
    ATTNSUITE_CUDA_CHECK_NOTHROW(cudaEventDestroy(stop_));
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start() override { ATTNSUITE_CUDA_CHECK(cudaEventRecord(start_, stream_)); }
  void stop() override { ATTNSUITE_CUDA_CHECK(cudaEventRecord(stop_, stream_)); }
  double elapsed_ms() override {
    ATTNSUITE_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    ATTNSUITE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

class CudaContext final : public bench::DeviceContext {
 public:
  explicit CudaContext(int device_index) : info_(query_cuda_device(device_index)) {
    ATTNSUITE_CUDA_CHECK(cudaSetDevice(info_.index));
    ATTNSUITE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaContext() override {
    cudaSetDevice(info_.index);
    ATTNSUITE_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_));
    if (flush_buffer_ != nullptr) ATTNSUITE_CUDA_CHECK_NOTHROW(cudaFree(flush_buffer_));
    ATTNSUITE_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
  }
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  Device device() const override { return {DeviceType::Cuda, info_.index}; }
  std::string device_name() const override { return info_.name; }

  std::unique_ptr<bench::DeviceAllocation> allocate(std::size_t bytes) override {
    activate();
    return std::make_unique<bench::BufferAllocation<DeviceBuffer>>(bytes);
  }
  void copy_to_device(void* dst, const void* host_src, std::size_t bytes) override {
    activate();
    ATTNSUITE_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    activate();
    ATTNSUITE_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // All-ones bits are NaN in fp16, bf16 and fp32.
  void poison(void* dst, std::size_t bytes) override {
    activate();
    ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, bytes, stream_));
  }

  bool generate(const TensorView& view, bench::genmath::Kind kind, std::uint64_t key) override {
    // e4m3 needs the amax of the whole tensor for its descale: the runner uploads the host copy.
    if (view.dtype == DType::E4M3) return false;
    GenerateTarget target;
    target.data = view.data;
    for (int dim = 0; dim < 4; ++dim) {
      target.shape[dim] = view.shape[dim];
      target.strides[dim] = view.strides[dim];
    }
    target.dtype_code = view.dtype == DType::F32 ? 0 : view.dtype == DType::F16 ? 1 : 2;
    generate_on_device(target, kind, key, stream_);
    return true;
  }

  Stream stream() override { return stream_; }
  void synchronize() override { ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // Writing twice the L2's size (60 MiB on the H200) leaves none of the inputs in it. The buffer
  // is the harness's, so it is not counted as backend memory; the value changes per call so no
  // layer can skip an unchanged write.
  void flush_cache() override {
    activate();
    if (flush_buffer_ == nullptr) {
      flush_bytes_ = 2 * std::max<std::size_t>(info_.l2_bytes, std::size_t{4} << 20);
      ATTNSUITE_CUDA_CHECK(cudaMalloc(&flush_buffer_, flush_bytes_));
    }
    ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(flush_buffer_, ++flush_value_ & 0xff, flush_bytes_, stream_));
  }
  std::unique_ptr<bench::Timer> make_timer() override {
    activate();
    return std::make_unique<EventTimer>(stream_);
  }

  std::size_t free_bytes() override {
    activate();
    std::size_t free = 0, total = 0;
    ATTNSUITE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }
  double clock_mhz() override { return nvml::sm_clock_mhz(info_.pci_bus_id); }
  // Every 10 ms: NVML's utilization counter itself averages over 1/6 s to 1 s (by GPU), so a
  // faster poll adds readings, not resolution; the SM clock is read as it stands.
  std::unique_ptr<bench::PeriodicSampler> start_sampling() override {
    if (!nvml::available()) return nullptr;
    const std::string bus = info_.pci_bus_id;
    return std::make_unique<bench::PeriodicSampler>(
        [bus] {
          bench::DeviceSample sample;
          sample.sm_clock_mhz = nvml::sm_clock_mhz(bus);
          sample.gpu_util_pct = nvml::gpu_utilization_pct(bus);
          return sample;
        },
        std::chrono::milliseconds(10));
  }
  std::optional<std::size_t> used_bytes() override {
    activate();
    std::size_t free = 0, total = 0;
    ATTNSUITE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return total - free;
  }

 private:
  void activate() const { ATTNSUITE_CUDA_CHECK(cudaSetDevice(info_.index)); }

  CudaDeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  void* flush_buffer_ = nullptr;
  std::size_t flush_bytes_ = 0;
  int flush_value_ = 0;
};

}  // namespace

std::unique_ptr<bench::DeviceContext> make_cuda_context(int device_index) {
  return std::make_unique<CudaContext>(device_index);
}

}  // namespace attnsuite::cuda
