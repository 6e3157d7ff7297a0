// What the CUDA devices are and can do at best, for the rooms that may not include src/cuda
// (the harness, the peers). Declared here, defined in src/cuda (common/device_info.cpp,
// profile/ceilings.cpp): in CUDA builds only (ATTNSUITE_HAVE_CUDA). Host-only, no CUDA headers.
#pragma once

#include <cstddef>
#include <string>

#include "core/ceilings.hpp"

namespace attnsuite::cuda {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;             // "NVIDIA H200"
  std::string pci_bus_id;       // "0000:19:00.0"
  std::string driver_version;   // NVIDIA driver "580.159.04" (NVML), else the CUDA driver API "13.0"
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

// The GPU fields of DeviceCeilings for device `device_index` (src/cuda/profile/ceilings.cpp):
// copy bandwidth, fp16/bf16 GEMM through cuBLAS, fp8 GEMM through cuBLASLt (sm_89 and later),
// the smallest timed operation. About a second. Throws Error.
bench::DeviceCeilings measure_gpu_ceilings(int device_index);

}  // namespace attnsuite::cuda
