// The CUDA side of attnsuite as the rest of the library sees it: backend registration, the
// harness's device context, the kernel-config key; what the device is comes with it
// (core/cuda_device.hpp). Host-only header (no CUDA headers), so host code that includes it
// builds with the host compiler alone.
#pragma once

#include <memory>
#include <string>

#include "attnsuite/device_context.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "attnsuite/registry.hpp"
#include "core/cuda_device.hpp"

namespace attnsuite::cuda {

// Registers "cuda-vanilla", "flash2", in builds with -DATTNSUITE_FLASH3=ON "flash3" and
// "flash3-fp8", then the quantized "sage" and "sage2".
// Needs no GPU: without one, their supports() answer "no CUDA device available: ...".
void register_cuda_backends(Registry& registry);

// The harness's context for CUDA device `device_index`: its own non-blocking stream, event
// timers, tracked allocations, an L2 flush and NVML clocks. Throws Error(Device,
// "no CUDA device: ...") when there is no such device.
std::unique_ptr<bench::DeviceContext> make_cuda_context(int device_index);

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

}  // namespace attnsuite::cuda
