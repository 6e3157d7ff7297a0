// Element types and host-side conversions between fp32 and the 16-bit and 8-bit formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace attnsuite {

// E4M3: FP8 e4m3 (OCP "E4M3FN", torch.float8_e4m3fn) inputs with a per-tensor descale: the real
// value of an element is e4m3 × descale (TensorView::descale). An e4m3 problem's output is bf16
// (output_dtype); it has no backward.
enum class DType { F32, F16, BF16, E4M3 };

std::string_view to_string(DType dtype);  // "fp32", "fp16", "bf16", "e4m3"
// "fp32"|"float32"|"f32", "fp16"|"float16"|"f16"|"half", "bf16"|"bfloat16", "e4m3"|"fp8"|"float8_e4m3fn"
std::optional<DType> parse_dtype(std::string_view name);
// The names parse_dtype takes, for error messages: "fp32, fp16, bf16, e4m3".
inline constexpr std::string_view kAllowedDTypes = "fp32, fp16, bf16, e4m3";

constexpr std::size_t size_of(DType dtype) { return dtype == DType::F32 ? 4 : dtype == DType::E4M3 ? 1 : 2; }

// The dtype of the output O of a problem whose inputs are `input`: the same, except e4m3 inputs
// give bf16 (as FP8 attention kernels write: an e4m3 O would need a scale chosen before the
// output exists). The one rule every backend, the harness and Python use.
constexpr DType output_dtype(DType input) { return input == DType::E4M3 ? DType::BF16 : input; }

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
// flash3-fp8 quantizes its bf16 inputs with it on the device (the tests model that with these);
// e4m3 tensors are made with quantize_e4m3.
std::uint8_t float_to_e4m3_bits(float value);
float e4m3_bits_to_float(std::uint8_t bits);

inline constexpr float kE4m3Max = 448.0f;

// Per-tensor quantization of count fp32 values to e4m3: descale = amax / 448 over the finite
// values (1 when there is none, or all are 0), dst[i] = e4m3(src[i] / descale) rounded to
// nearest even, saturating; ±Inf becomes NaN (e4m3 has no infinity; as flash3-fp8's pre-pass),
// NaN stays NaN. Returns the descale: dst[i] × descale ≈ src[i].
float quantize_e4m3(const float* src, std::uint8_t* dst, std::size_t count);

// Loads element i of a buffer of the given dtype as float (an e4m3 element as its e4m3 value,
// without the tensor's descale: load(TensorView, offset) applies it).
inline float load_as_float(const void* data, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::F32:
      return static_cast<const float*>(data)[index];
    case DType::F16:
      return fp16_bits_to_float(static_cast<const std::uint16_t*>(data)[index]);
    case DType::BF16:
      return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[index]);
    case DType::E4M3:
      return e4m3_bits_to_float(static_cast<const std::uint8_t*>(data)[index]);
  }
  return 0.0f;
}

inline void store_from_float(void* data, DType dtype, std::int64_t index, float value) {
  switch (dtype) {
    case DType::F32:
      static_cast<float*>(data)[index] = value;
      break;
    case DType::F16:
      static_cast<std::uint16_t*>(data)[index] = float_to_fp16_bits(value);
      break;
    case DType::BF16:
      static_cast<std::uint16_t*>(data)[index] = float_to_bf16_bits(value);
      break;
    case DType::E4M3:
      static_cast<std::uint8_t*>(data)[index] = float_to_e4m3_bits(value);
      break;
  }
}

// Bulk conversions of count contiguous elements (vectorized where the CPU allows); e4m3 as
// load_as_float / store_from_float (no descale).
void convert_to_float(const void* src, DType dtype, float* dst, std::size_t count);
void convert_from_float(const float* src, void* dst, DType dtype, std::size_t count);

}  // namespace attnsuite
