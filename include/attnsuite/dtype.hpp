// Element types and host-side conversions between fp32 and the 16-bit formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace attnsuite {

enum class DType { F32, F16, BF16 };

std::string_view to_string(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);  // "fp32"|"float32", "fp16"|"float16", "bf16"|"bfloat16"

constexpr std::size_t size_of(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

// Round-to-nearest-even conversions (the same as the hardware and PyTorch); NaN stays NaN.
inline std::uint16_t float_to_bf16_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

inline float bf16_bits_to_float(std::uint16_t half) {
  std::uint32_t bits = static_cast<std::uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

std::uint16_t float_to_fp16_bits(float value);
float fp16_bits_to_float(std::uint16_t half);

// FP8 e4m3 (OCP "E4M3FN": bias 7, no infinities, NaN = S.1111.111, largest finite ±448,
// subnormals down to 2^-9), as the host model of the GPU's cvt.rn.satfinite.e4m3x2.f32:
// round to nearest even, saturating to ±448 (±inf included), NaN stays NaN (0x7f | sign).
// Not a tensor dtype yet: flash3-fp8 quantizes its bf16 inputs with it on the device, and the
// tests model that quantization with these.
std::uint8_t float_to_e4m3_bits(float value);
float e4m3_bits_to_float(std::uint8_t bits);

// Loads element i of a buffer of the given dtype as float.
inline float load_as_float(const void* data, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(data)[index];
    case DType::F16: return fp16_bits_to_float(static_cast<const std::uint16_t*>(data)[index]);
    case DType::BF16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[index]);
  }
  return 0.0f;
}

inline void store_from_float(void* data, DType dtype, std::int64_t index, float value) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(data)[index] = value; break;
    case DType::F16: static_cast<std::uint16_t*>(data)[index] = float_to_fp16_bits(value); break;
    case DType::BF16: static_cast<std::uint16_t*>(data)[index] = float_to_bf16_bits(value); break;
  }
}

// Bulk conversions of count contiguous elements (vectorized where the CPU allows).
void convert_to_float(const void* src, DType dtype, float* dst, std::size_t count);
void convert_from_float(const float* src, void* dst, DType dtype, std::size_t count);

}  // namespace attnsuite
