#include "attnsuite/dtype.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/enum_names.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace attnsuite {

namespace {
// The names to_string gives, then the other spellings parse_dtype takes.
constexpr EnumName<DType> kDTypeNames[] = {
    {DType::F32, "fp32"}, {DType::F16, "fp16"}, {DType::BF16, "bf16"}, {DType::E4M3, "e4m3"}};
constexpr EnumName<DType> kDTypeAliases[] = {
    {DType::F32, "float32"}, {DType::F32, "f32"},       {DType::F16, "float16"}, {DType::F16, "f16"},
    {DType::F16, "half"},    {DType::BF16, "bfloat16"}, {DType::E4M3, "fp8"},    {DType::E4M3, "float8_e4m3fn"}};
}  // namespace

std::string_view to_string(DType dtype) { return name_of(kDTypeNames, dtype, "?"); }

std::optional<DType> parse_dtype(std::string_view name) {
  if (const std::optional<DType> dtype = value_of(kDTypeNames, name)) return dtype;
  return value_of(kDTypeAliases, name);
}

// IEEE binary16 with round-to-nearest-even, written out so it does not depend on compiler
// support for _Float16.
std::uint16_t float_to_fp16_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow, inf
  if (magnitude < 0x38800000u) {                                                    // subnormal or zero in fp16
    if (magnitude < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;  // 14 + (112 - exponent + 1) - 1
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  magnitude -= 0x38000000u;  // rebias exponent 127 -> 15
  magnitude += 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (magnitude >> 13));
}

float fp16_bits_to_float(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  std::uint32_t exponent = (half >> 10) & 0x1fu;
  std::uint32_t mantissa = half & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {
      const float value = std::ldexp(static_cast<float>(mantissa), -24);
      std::memcpy(&bits, &value, 4);
      bits |= sign;
    }
  } else {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

void convert_to_float(const void* src, DType dtype, float* dst, std::size_t count) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::BF16: {
      const auto* in = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < count; ++i) dst[i] = bf16_bits_to_float(in[i]);
      return;
    }
    case DType::F16: {
      const auto* in = static_cast<const std::uint16_t*>(src);
      std::size_t i = 0;
#if defined(__F16C__)
      for (; i + 8 <= count; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
      }
#endif
      for (; i < count; ++i) dst[i] = fp16_bits_to_float(in[i]);
      return;
    }
    case DType::E4M3: {
      const auto* in = static_cast<const std::uint8_t*>(src);
      for (std::size_t i = 0; i < count; ++i) dst[i] = e4m3_bits_to_float(in[i]);
      return;
    }
  }
}

void convert_from_float(const float* src, void* dst, DType dtype, std::size_t count) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, count * 4);
      return;
    case DType::BF16: {
      auto* out = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < count; ++i) out[i] = float_to_bf16_bits(src[i]);
      return;
    }
    case DType::F16: {
      auto* out = static_cast<std::uint16_t*>(dst);
      std::size_t i = 0;
#if defined(__F16C__)
      for (; i + 8 <= count; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
      }
#endif
      for (; i < count; ++i) out[i] = float_to_fp16_bits(src[i]);
      return;
    }
    case DType::E4M3: {
      auto* out = static_cast<std::uint8_t*>(dst);
      for (std::size_t i = 0; i < count; ++i) out[i] = float_to_e4m3_bits(src[i]);
      return;
    }
  }
}

std::uint8_t float_to_e4m3_bits(float value) {
  const std::uint8_t sign = std::signbit(value) ? 0x80u : 0x00u;
  if (std::isnan(value)) return static_cast<std::uint8_t>(sign | 0x7fu);
  const float magnitude = std::fabs(value);
  // Everything at or past the midpoint between 448 and 480 (the next step of the exponent
  // range) would round to a value above 448: satfinite clamps it, inf included.
  if (magnitude >= 464.0f) return static_cast<std::uint8_t>(sign | 0x7eu);
  if (magnitude < 0.015625f) {
    // Subnormal range (below 2^-6): steps of 2^-9; magnitude·512 is exact, nearbyint rounds
    // half to even, and 8 steps encode as the smallest normal (exponent 1, mantissa 0).
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(std::nearbyint(magnitude * 512.0f)));
  }
  int exponent = 0;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction·2^exponent, fraction in [0.5, 1)
  // Mantissa steps of 1/8 of [1, 2): (2·fraction − 1)·8 is exact; a carry to 8 moves up an exponent.
  int mantissa = static_cast<int>(std::nearbyint((2.0f * fraction - 1.0f) * 8.0f));
  int biased = exponent - 1 + 7;
  if (mantissa == 8) {
    mantissa = 0;
    ++biased;
  }
  if (biased > 15 || (biased == 15 && mantissa == 7)) return static_cast<std::uint8_t>(sign | 0x7eu);
  return static_cast<std::uint8_t>(sign | biased << 3 | mantissa);
}

float e4m3_bits_to_float(std::uint8_t bits) {
  const float sign = (bits & 0x80u) != 0 ? -1.0f : 1.0f;
  const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

float quantize_e4m3(const float* src, std::uint8_t* dst, std::size_t count) {
  float amax = 0.0f;
  for (std::size_t i = 0; i < count; ++i)
    if (std::isfinite(src[i])) amax = std::max(amax, std::fabs(src[i]));
  const float descale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
  const float inverse = amax > 0.0f ? kE4m3Max / amax : 1.0f;
  for (std::size_t i = 0; i < count; ++i) {
    const float x = std::isinf(src[i]) ? std::numeric_limits<float>::quiet_NaN() : src[i];
    dst[i] = float_to_e4m3_bits(x * inverse);
  }
  return descale;
}

}  // namespace attnsuite
