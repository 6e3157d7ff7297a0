// What the CUDA device is, and whether there is one at all.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <utility>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/nvml.hpp"
#include "cuda/cuda_backends.hpp"

namespace attnsuite::cuda {

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

// The one place that says why there is no GPU. A machine without a GPU usually has no driver
// either, which the runtime reports as cudaErrorInsufficientDriver: "CUDA driver version is
// insufficient for CUDA runtime version" read as a version problem to a user who has no GPU.
std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    switch (status) {
      case cudaErrorInsufficientDriver: {
        // No driver library at all (the usual machine without a GPU), or one too old for us.
        if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver == nullptr) {
          return "no GPU (no CUDA driver)";
        } else {
          dlclose(driver);
        }
        int runtime = 0;
        cudaRuntimeGetVersion(&runtime);
        cudaGetLastError();
        return fmt::format("no usable GPU: the CUDA driver is older than the CUDA {}.{} runtime this build uses",
                           runtime / 1000, runtime % 1000 / 10);
      }
      case cudaErrorNoDevice:
        return "no GPU (the CUDA driver sees no device)";
      default:
        return fmt::format("no GPU usable (cudaGetDeviceCount failed: {})", cudaGetErrorString(status));
    }
  }
  return count > 0 ? std::string() : std::string("no GPU (no CUDA device visible)");
}

void require_cuda_device(int device_index) {
  const std::string reason = cuda_unavailable_reason();
  if (!reason.empty()) throw Error(ErrorKind::Device, "no CUDA device: " + reason);
  const int count = cuda_device_count();
  if (device_index < 0 || device_index >= count) {
    throw Error(ErrorKind::Device,
                fmt::format("no CUDA device: index {} asked for, {} visible (0..{})", device_index, count, count - 1));
  }
}

CudaDeviceInfo query_cuda_device(int device_index) {
  require_cuda_device(device_index);
  cudaDeviceProp props{};
  ATTNSUITE_CUDA_CHECK(cudaGetDeviceProperties(&props, device_index));
  CudaDeviceInfo info;
  info.index = device_index;
  info.name = props.name;
  info.cc_major = props.major;
  info.cc_minor = props.minor;
  info.sm_count = props.multiProcessorCount;
  info.l2_bytes = static_cast<std::size_t>(props.l2CacheSize);
  info.memory_bytes = props.totalGlobalMem;
  info.max_shared_memory_per_block = props.sharedMemPerBlockOptin;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_index) == cudaSuccess) info.pci_bus_id = bus_id;
  ATTNSUITE_CUDA_CHECK(cudaDriverGetVersion(&info.cuda_driver_version));
  ATTNSUITE_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  info.driver_version = nvml::driver_version();
  if (info.driver_version.empty()) {
    info.driver_version =
        fmt::format("CUDA driver API {}.{}", info.cuda_driver_version / 1000, info.cuda_driver_version % 1000 / 10);
  }
  return info;
}

KernelConfigKey kernel_config_key(int device_index, std::string backend, const AttentionProblem& problem) {
  static std::mutex mutex;
  static std::map<int, std::pair<std::string, std::string>> known;
  std::pair<std::string, std::string> device;
  {
    std::lock_guard lock(mutex);
    auto found = known.find(device_index);
    if (found == known.end()) {
      const CudaDeviceInfo info = query_cuda_device(device_index);
      found = known.emplace(device_index, std::make_pair(info.name, info.driver_version)).first;
    }
    device = found->second;
  }
  return {std::move(device.first), std::move(device.second), std::move(backend), kernel_shape_class(problem)};
}

int plan_device(const PlanOptions& options) {
  if (options.cuda_device >= 0) return options.cuda_device;
  int device = 0;
  ATTNSUITE_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void synchronize_stream(Stream stream) {
  ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

}  // namespace attnsuite::cuda
