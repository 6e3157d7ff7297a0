// The CUDA side of attnsuite as the rest of the library sees it: backend registration, the
// harness's device context, and what the device is. Host-only header (no CUDA headers), so
// host code that includes it builds with the host compiler alone.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "attnsuite/kernel_configs.hpp"
#include "attnsuite/registry.hpp"
#include "attnsuite/device_context.hpp"
#include "bench/result.hpp"

namespace attnsuite::cuda {

// Registers "cuda-vanilla", "flash2", in builds with -DATTNSUITE_FLASH3=ON "flash3" and
// "flash3-fp8", then the quantized "sage" and "sage2".
// Needs no GPU: without one, their supports() answer "no CUDA device available: ...".
void register_cuda_backends(Registry& registry);

// The harness's context for CUDA device `device_index`: its own non-blocking stream, event
// timers, tracked allocations, an L2 flush and NVML clocks. Throws Error(Device,
// "no CUDA device: ...") when there is no such device.
std::unique_ptr<bench::DeviceContext> make_cuda_context(int device_index);

struct CudaDeviceInfo {
  int index = 0;
  std::string name;            // "NVIDIA H200"
  std::string pci_bus_id;      // "0000:19:00.0"
  std::string driver_version;  // NVIDIA driver "580.159.04" (NVML), else the CUDA driver API "13.0"
  int cuda_driver_version = 0;  // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;      // cudaRuntimeGetVersion, e.g. 13000
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  std::size_t memory_bytes = 0;
  std::size_t max_shared_memory_per_block = 0;  // opt-in limit (227 KiB on Hopper)

  int compute_capability() const { return cc_major * 10 + cc_minor; }  // 90 for Hopper
};

// Number of visible CUDA devices; 0 (never throws) when there is no driver or no GPU.
int cuda_device_count() noexcept;
// Why no CUDA device can be used, as a user reads it: "no GPU (no CUDA driver)", "no usable GPU:
// the CUDA driver is older than the CUDA 13.0 runtime this build uses", "no GPU (the CUDA driver
// sees no device)", "no GPU (no CUDA device visible)"; empty when at least one is.
std::string cuda_unavailable_reason();
// Throws Error(Device, "no CUDA device: ...") unless device_index names a visible device.
void require_cuda_device(int device_index);
// Throws like require_cuda_device.
CudaDeviceInfo query_cuda_device(int device_index);

// The device half of a kernel-config cache key (attnsuite/kernel_configs.hpp) for device
// `device_index`: its name and driver version, queried once per device and process. Throws like
// require_cuda_device.
KernelConfigKey kernel_config_key(int device_index, std::string backend, const AttentionProblem& problem);
// The CUDA device a plan made with `options` runs on: options.cuda_device when it is >= 0, else
// the current device (cudaGetDevice). Throws Error(Device) when the current one cannot be queried.
int plan_device(const PlanOptions& options);

// Waits for the work queued on `stream` (a cudaStream_t; null: the legacy default stream).
// Throws Error(Device) naming the CUDA error.
void synchronize_stream(Stream stream);

// The GPU fields of DeviceCeilings for device `device_index` (src/cuda/profile/ceilings.cpp):
// copy bandwidth, fp16/bf16 GEMM through cuBLAS, fp8 GEMM through cuBLASLt (sm_89 and later),
// the smallest timed operation. About a second. Throws Error.
bench::DeviceCeilings measure_gpu_ceilings(int device_index);

}  // namespace attnsuite::cuda
