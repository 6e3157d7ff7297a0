// The kernels of fp8_output.hpp.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/common/fp8_output.hpp"

namespace attnsuite::cuda {
namespace {

__global__ void write_floats_kernel(float* device, const DeviceFloats floats) {
  for (int i = 0; i < floats.count; ++i) device[i] = floats.values[i];
}

// One thread per pair of adjacent elements along dim.
__global__ void widen_e4m3_kernel(const E4m3Widening w) {
  const std::int64_t pairs_per_row = w.shape[3] / 2;
  const std::int64_t total = w.shape[0] * w.shape[1] * w.shape[2] * pairs_per_row;
  const float scale = *w.scale;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t d = 2 * (i % pairs_per_row);
    std::int64_t rest = i / pairs_per_row;
    const std::int64_t h = rest % w.shape[2];
    rest /= w.shape[2];
    const std::int64_t s = rest % w.shape[1];
    const std::int64_t b = rest / w.shape[1];
    const std::uint8_t* in = w.in + b * w.in_strides[0] + s * w.in_strides[1] + h * w.in_strides[2] + d;
    __nv_fp8_e4m3 low, high;
    low.__x = in[0];
    high.__x = in[1];
    auto* out =
        static_cast<__nv_bfloat16*>(w.out) + b * w.out_strides[0] + s * w.out_strides[1] + h * w.out_strides[2] + d;
    *reinterpret_cast<__nv_bfloat162*>(out) =
        __floats2bfloat162_rn(static_cast<float>(low) * scale, static_cast<float>(high) * scale);
  }
}

}  // namespace

void write_floats_async(float* device, const DeviceFloats& floats, void* stream) {
  write_floats_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(device, floats);
  ATTNSUITE_CUDA_CHECK_LAUNCH("write_floats_kernel");
}

void widen_e4m3_to_bf16_async(const E4m3Widening& widening, void* stream) {
  const std::int64_t pairs = widening.shape[0] * widening.shape[1] * widening.shape[2] * (widening.shape[3] / 2);
  if (pairs == 0) return;
  constexpr int kThreads = 256;
  const std::int64_t blocks = (pairs + kThreads - 1) / kThreads;
  widen_e4m3_kernel<<<static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(widening);
  ATTNSUITE_CUDA_CHECK_LAUNCH("widen_e4m3_kernel");
}

}  // namespace attnsuite::cuda
