// Device helpers for a backend whose kernel writes O in e4m3 (cuDNN's FP8 SDPA on Hopper, which
// writes FP8 O only): its per-tensor scales written on the stream, and O widened to bf16 into the
// caller's view. Host declarations; the kernels are in fp8_output.cu.
#pragma once

#include <cstdint>

namespace attnsuite::cuda {

// Up to 8 floats into device memory by a one-thread kernel on `stream` (a cudaStream_t): ordered
// with the stream's work and capturable in a CUDA graph, which a host copy is not.
struct DeviceFloats {
  float values[8] = {};
  int count = 0;
};
void write_floats_async(float* device, const DeviceFloats& floats, void* stream);

// out (bf16; element (b, s, h, d) at out + b·out_strides[0] + s·[1] + h·[2] + d) =
// in (e4m3 bytes at in + b·in_strides[0] + s·[1] + h·[2] + d) × scale, for the (batch, seq, heads,
// dim) shape; dim even. Throws Error(Device) on a launch failure.
struct E4m3Widening {
  const std::uint8_t* in = nullptr;
  void* out = nullptr;
  std::int64_t shape[4] = {0, 0, 0, 0};
  std::int64_t in_strides[4] = {0, 0, 0, 1};
  std::int64_t out_strides[4] = {0, 0, 0, 1};
  const float* scale = nullptr;  // device pointer (written on the stream before)
};
void widen_e4m3_to_bf16_async(const E4m3Widening& widening, void* stream);

}  // namespace attnsuite::cuda
