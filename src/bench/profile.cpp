#include "bench/profile.hpp"

#include <cmath>

#include "core/enum_names.hpp"

namespace attnsuite::bench {

Roof roof_for(const DeviceCeilings& c, std::string_view device, std::string_view dtype) {
  Roof roof;
  if (device == "cpu") {
    roof.compute_flops_per_s = c.cpu_fp32_gflops * 1e9;
    roof.compute_label = "fp32 FMA (CPU)";
    roof.memory_bytes_per_s = c.host_copy_gbps * 1e9;
    roof.memory_label = "host copy";
    roof.launch_seconds = c.cpu_dispatch_us * 1e-6;
    return roof;
  }
  if (device.starts_with("cuda")) {
    roof.memory_bytes_per_s = c.gpu_copy_gbps * 1e9;
    roof.memory_label = "device copy";
    roof.launch_seconds = c.gpu_launch_us * 1e-6;
    if (dtype == "fp16") {
      roof.compute_flops_per_s = c.gpu_fp16_tflops * 1e12;
      roof.compute_label = "fp16 GEMM (cuBLAS)";
    } else if (dtype == "bf16") {
      roof.compute_flops_per_s = c.gpu_bf16_tflops * 1e12;
      roof.compute_label = "bf16 GEMM (cuBLAS)";
    } else if (dtype.starts_with("fp8") || dtype.starts_with("e4m3") || dtype.starts_with("e5m2")) {
      roof.compute_flops_per_s = c.gpu_fp8_tflops * 1e12;
      roof.compute_label = "fp8 GEMM (cuBLASLt)";
    }
  }
  return roof;
}

namespace {
constexpr EnumName<Bottleneck> kBottleneckNames[] = {{Bottleneck::Compute, "compute-bound"},
                                                     {Bottleneck::Memory, "memory-bound"},
                                                     {Bottleneck::Latency, "latency-bound"}};
}  // namespace

std::string_view to_string(Bottleneck bottleneck) { return name_of(kBottleneckNames, bottleneck, "unknown"); }

std::optional<Bottleneck> classify(double flops, double bytes, const Roof& roof) {
  if (!roof.complete() || !(flops >= 0) || !(bytes >= 0)) return std::nullopt;
  const double t_compute = flops / roof.compute_flops_per_s;
  const double t_memory = bytes / roof.memory_bytes_per_s;
  if (roof.launch_seconds > 0 && std::max(t_compute, t_memory) < roof.launch_seconds) return Bottleneck::Latency;
  return t_compute >= t_memory ? Bottleneck::Compute : Bottleneck::Memory;
}

void apply_profile(ResultRow& row, const DeviceCeilings& ceilings) {
  if (row.status != CaseStatus::Ok || !row.tflops || !row.gbps || !row.ms_median) return;
  if (!(*row.gbps > 0) || !(*row.ms_median > 0)) return;
  const Roof roof = roof_for(ceilings, row.device, row.dtype);
  row.intensity = *row.tflops * 1e3 / *row.gbps;
  if (roof.compute_flops_per_s > 0) row.compute_ceiling_pct = 100.0 * *row.tflops * 1e12 / roof.compute_flops_per_s;
  if (roof.memory_bytes_per_s > 0) row.memory_ceiling_pct = 100.0 * *row.gbps * 1e9 / roof.memory_bytes_per_s;
  const double seconds = *row.ms_median * 1e-3;
  if (const auto kind = classify(*row.tflops * 1e12 * seconds, *row.gbps * 1e9 * seconds, roof))
    row.bottleneck = std::string(to_string(*kind));
}

void apply_profile(std::vector<ResultRow>& rows, const DeviceCeilings& ceilings) {
  for (ResultRow& row : rows) apply_profile(row, ceilings);
}

}  // namespace attnsuite::bench
