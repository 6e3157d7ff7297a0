// The 16-bit element types to and from fp32, and a warp's sum, in device code: shared by the
// kernels that work element by element (cuda-vanilla's softmax, sparge's predictor, the
// backward's row-wise kernels, the ring's LSE merge).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace attnsuite::cuda {

__device__ __forceinline__ float to_float(__half value) { return __half2float(value); }
__device__ __forceinline__ float to_float(__nv_bfloat16 value) { return __bfloat162float(value); }

// fp32 rounded to nearest even.
template <class Element>
__device__ __forceinline__ Element from_float(float value);
template <>
__device__ __forceinline__ __half from_float<__half>(float value) {
  return __float2half_rn(value);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

// The sum over the 32 lanes of a warp, in every lane (butterfly).
__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

}  // namespace attnsuite::cuda
