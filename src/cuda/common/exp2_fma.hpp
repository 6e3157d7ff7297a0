// 2^x without the SFU: the softmax's exponentials moved, for a share of the scores, from the
// MUFU unit (ex2.approx: 16 results per clock per SM on sm_80/sm_90) to the FMA and integer
// pipes. At 8 bits (sage2, flash3-fp8) and at d64 the tensor-core time per tile is short enough
// that MUFU sets the pace; the kernels that take this path say which share they give it.
//
// Host and device: the same operations in the same order (IEEE single, round to nearest, fused
// multiply-adds), so tests/cpp/test_exp2_fma.cpp checks the device's results on the CPU.
#pragma once

#include <cstdint>
#include <cstring>

#if !defined(__CUDACC__)
#include <cmath>
#endif

#include "cuda/common/host_device.hpp"

namespace attnsuite::cuda {

// 2^f ≈ P(f) on |f| <= 1/2: relative-error minimax fit of degree 3 (Lawson's iteration on 20001
// points, rounded to float), max relative error 7.5e-5 evaluated in float. A softmax
// probability is rounded to bf16 (2^-9 = 2.0e-3) or e4m3 (2^-4) right after, so degree 3 is
// enough; degree 2 (1.7e-3) would be as large as bf16's own rounding. The coefficients are in
// exp2_fma itself, highest degree first (constants: a namespace-scope array is not device code).
namespace detail {
ATTNSUITE_HOST_DEVICE std::int32_t float_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(value);
#else
  std::int32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}
ATTNSUITE_HOST_DEVICE float bits_float(std::int32_t bits) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}
ATTNSUITE_HOST_DEVICE float fused_multiply_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}
}  // namespace detail

// 2^x for x <= 127 (the softmax passes x <= 0): x = n + f with n = round(x) taken from the
// low mantissa bits of x + 1.5·2^23 (float adds, no conversion instruction),
// 2^f = P(f) by three FMAs, 2^n built as float bits ((n + 127) << 23) and multiplied in.
//   x <= -127 (masked scores, -inf): n = -127 makes 2^n's bits 0, so the result is exactly 0,
//   as the online softmax needs for its masked scores and a row that has seen no key yet.
//   NaN: the clamp's comparison is false for NaN, so x stays NaN, P(f) is NaN and so is the
//   result (fmaxf would have turned it into 0 and hidden a NaN of Q, K or V).
//   Results below 2^-126 are denormal here; the kernels' FTZ arithmetic may flush them to 0.
// About ten instructions on the FMA and integer pipes (a compare-select, 3 adds, 3 FMAs, an
// integer add and shift, a multiply) against one MUFU.EX2.
ATTNSUITE_HOST_DEVICE float exp2_fma(float x) {
  constexpr float kRoundingShift = 12582912.0f;  // 1.5·2^23: x + it has round(x) in its low bits
  x = x < -127.0f ? -127.0f : x;
  const float shifted = x + kRoundingShift;
  const float fraction = x - (shifted - kRoundingShift);  // in [-1/2, 1/2]
  float p = 5.517132207751274e-2f;
  p = detail::fused_multiply_add(p, fraction, 2.4261054396629333e-1f);
  p = detail::fused_multiply_add(p, fraction, 6.932609677314758e-1f);
  p = detail::fused_multiply_add(p, fraction, 9.999281167984009e-1f);
  // The low bits of `shifted` hold round(x) + 0x400000 (two's complement within the mantissa).
  const std::int32_t whole = detail::float_bits(shifted) - detail::float_bits(kRoundingShift);
  return p * detail::bits_float(static_cast<std::int32_t>(static_cast<std::uint32_t>(whole + 127) << 23));
}

}  // namespace attnsuite::cuda

#undef ATTNSUITE_HOST_DEVICE
