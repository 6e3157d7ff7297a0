// The roofline profile of a case: which device ceilings apply to it, how close it came to each,
// and what bounds it. The rule is stated in docs/methodology.md ("Profile").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/result.hpp"

namespace attnsuite::bench {

// The ceilings that bound a case on its device, in SI units; 0 where not measured.
struct Roof {
  double compute_flops_per_s = 0;
  double memory_bytes_per_s = 0;
  double launch_seconds = 0;  // the smallest timed operation on that device
  std::string compute_label;  // "fp16 GEMM (cuBLAS)"
  std::string memory_label;   // "device copy"
  bool complete() const { return compute_flops_per_s > 0 && memory_bytes_per_s > 0; }
  // FLOP per byte where the two roofs meet.
  double ridge() const { return complete() ? compute_flops_per_s / memory_bytes_per_s : 0; }
};

// CPU rows ("cpu") meet the fp32 FMA peak whatever their input dtype (the CPU backends compute
// in fp32) and the host copy bandwidth; GPU rows ("cuda:N") the GEMM rate of their dtype (fp16,
// bf16, fp8) and the device copy bandwidth. Unknown devices or dtypes give an empty roof.
Roof roof_for(const DeviceCeilings& ceilings, std::string_view device, std::string_view dtype);

enum class Bottleneck { Compute, Memory, Latency };
std::string_view to_string(Bottleneck bottleneck);  // compute-bound, memory-bound, latency-bound

// With t_compute = flops / compute ceiling and t_memory = bytes / memory ceiling, the shortest
// time the roofline allows is t_roof = max(t_compute, t_memory). Latency/launch-bound when
// t_roof < the launch time (fixed cost is more than half of the best possible time); else
// compute-bound when t_compute >= t_memory (intensity at or above the ridge), else
// memory-bound. nullopt when the roof is incomplete.
std::optional<Bottleneck> classify(double flops, double bytes, const Roof& roof);

// Sets intensity, compute_ceiling_pct, memory_ceiling_pct and bottleneck of an ok row from its
// TFLOP/s, GB/s and median (intensity = flops / min_bytes = TFLOP/s / GB/s), where the roof
// knows the ceiling; leaves the rest as it was.
void apply_profile(ResultRow& row, const DeviceCeilings& ceilings);
void apply_profile(std::vector<ResultRow>& rows, const DeviceCeilings& ceilings);

}  // namespace attnsuite::bench
