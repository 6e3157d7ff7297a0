// The ceilings of the devices a run measures on. Here, below the harness and the backends, so
// that src/cuda fills the GPU's (core/cuda_device.hpp) without including the harness that
// records them in the results header (bench/result.hpp).
#pragma once

#include <string>

namespace attnsuite::bench {

// What the devices of a run can do at best, measured once per run (docs/methodology.md,
// "Profile"); 0 = not measured. Copy bandwidths count bytes read plus bytes written (STREAM's
// Copy convention), like the rows' GB/s, which count Q, K, V read and O written.
struct DeviceCeilings {
  double cpu_fp32_gflops = 0;  // AVX2 FMA chains on every thread
  double host_copy_gbps = 0;   // memcpy of buffers far larger than the last-level cache
  double cpu_dispatch_us = 0;  // fastest empty parallel_for over every thread
  double gpu_copy_gbps = 0;    // device-to-device cudaMemcpyAsync, 2 × bytes / time
  double gpu_fp16_tflops = 0;  // cuBLAS GEMM, fp16 in, fp32 accumulate
  double gpu_bf16_tflops = 0;  // cuBLAS GEMM, bf16 in, fp32 accumulate
  double gpu_fp8_tflops = 0;   // cuBLASLt GEMM, e4m3 in, fp32 accumulate (0: GPU has none)
  double gpu_launch_us = 0;    // fastest event-timed 1-byte memset: the smallest timed operation
  std::string gpu_gemm_shape;  // "8192x8192x8192"
};

}  // namespace attnsuite::bench
