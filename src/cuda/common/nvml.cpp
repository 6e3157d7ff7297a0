#include "cuda/common/nvml.hpp"

#include <dlfcn.h>

#include <mutex>

namespace attnsuite::cuda::nvml {
namespace {

// The few NVML entry points used, declared here with NVML's documented C ABI (nvml.h is not
// part of this toolkit): nvmlReturn_t is an int enum with NVML_SUCCESS = 0, nvmlDevice_t an
// opaque pointer, NVML_CLOCK_SM = 1.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kSuccess = 0;
constexpr int kClockSm = 1;
struct NvmlUtilization {  // nvmlUtilization_t
  unsigned gpu;
  unsigned memory;
};

struct Library {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*device_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  bool ready = false;
};

template <class Fn>
bool bind(void* handle, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  return fn != nullptr;
}

// Loaded and initialised once; never shut down (the process may query until it exits).
const Library& library() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
    void* handle = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (handle == nullptr) return;
    const bool bound = bind(handle, "nvmlInit_v2", lib.init) &&
                       bind(handle, "nvmlDeviceGetHandleByPciBusId_v2", lib.device_by_pci_bus_id) &&
                       bind(handle, "nvmlDeviceGetClockInfo", lib.clock_info) &&
                       bind(handle, "nvmlSystemGetDriverVersion", lib.driver_version) &&
                       bind(handle, "nvmlDeviceGetUtilizationRates", lib.utilization);
    lib.ready = bound && lib.init() == kSuccess;
  });
  return lib;
}

}  // namespace

bool available() noexcept { return library().ready; }

double gpu_utilization_pct(const std::string& pci_bus_id) noexcept {
  const Library& lib = library();
  if (!lib.ready || pci_bus_id.empty()) return -1;
  NvmlDevice device = nullptr;
  if (lib.device_by_pci_bus_id(pci_bus_id.c_str(), &device) != kSuccess) return -1;
  NvmlUtilization rates{};
  return lib.utilization(device, &rates) == kSuccess ? static_cast<double>(rates.gpu) : -1;
}

unsigned sm_clock_mhz(const std::string& pci_bus_id) noexcept {
  const Library& lib = library();
  if (!lib.ready || pci_bus_id.empty()) return 0;
  NvmlDevice device = nullptr;
  if (lib.device_by_pci_bus_id(pci_bus_id.c_str(), &device) != kSuccess) return 0;
  unsigned mhz = 0;
  return lib.clock_info(device, kClockSm, &mhz) == kSuccess ? mhz : 0;
}

std::string driver_version() noexcept {
  const Library& lib = library();
  if (!lib.ready) return {};
  char text[96] = {};
  if (lib.driver_version(text, sizeof(text)) != kSuccess) return {};
  return text;
}

}  // namespace attnsuite::cuda::nvml
