// NVML, loaded with dlopen on first use. Linking libnvidia-ml would make every attnsuite binary
// fail to start on a machine without the NVIDIA driver (this toolkit ships no NVML stub either),
// so NVML is optional at run time: every query answers 0 / "" when it is missing or fails.
#pragma once

#include <string>

namespace attnsuite::cuda::nvml {

// Whether NVML loaded and initialised.
bool available() noexcept;
// Current SM clock in MHz of the GPU with this PCI bus id; 0 when unknown.
unsigned sm_clock_mhz(const std::string& pci_bus_id) noexcept;
// Percent of the last sample period (1/6 s to 1 s, by GPU) during which a kernel ran; -1
// when unknown.
double gpu_utilization_pct(const std::string& pci_bus_id) noexcept;
// The NVIDIA driver's version, e.g. "580.159.04"; empty when unknown.
std::string driver_version() noexcept;

}  // namespace attnsuite::cuda::nvml
