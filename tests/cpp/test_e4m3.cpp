// The host model of fp32 → e4m3 (float_to_e4m3_bits, dtype.hpp), which the flash3-fp8 GPU tests
// use to reproduce the backend's quantization: every code, against a brute-force nearest-even
// search over the 254 finite values, and the saturation / NaN rules of cvt.rn.satfinite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "attnsuite/dtype.hpp"

namespace attnsuite {
namespace {

bool is_nan_code(int bits) { return (bits & 0x7f) == 0x7f; }

TEST(E4m3, EveryFiniteCodeRoundTrips) {
  int finite = 0;
  for (int bits = 0; bits < 256; ++bits) {
    if (is_nan_code(bits)) continue;
    ++finite;
    const float value = e4m3_bits_to_float(static_cast<std::uint8_t>(bits));
    ASSERT_TRUE(std::isfinite(value)) << bits;
    EXPECT_EQ(float_to_e4m3_bits(value), bits) << "code " << bits << " = " << value;
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(e4m3_bits_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x08), 0.015625f);             // smallest normal, 2^-6
  EXPECT_EQ(e4m3_bits_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0xff)));
}

// The nearest finite e4m3 value, ties to the even code (mantissa LSB 0); beyond 448: 448.
std::uint8_t brute_force(float value) {
  std::uint8_t best = 0;
  double best_error = std::numeric_limits<double>::infinity();
  for (int bits = 0; bits < 256; ++bits) {
    if (is_nan_code(bits)) continue;
    const double error = std::abs(static_cast<double>(e4m3_bits_to_float(static_cast<std::uint8_t>(bits))) - value);
    if (((bits & 0x80) != 0) != std::signbit(value)) continue;  // the sign is kept (zero included)
    if (error < best_error || (error == best_error && (bits & 1) == 0)) {
      best_error = error;
      best = static_cast<std::uint8_t>(bits);
    }
  }
  return best;
}

TEST(E4m3, RoundsToNearestEvenLikeABruteForceSearch) {
  std::vector<float> values;
  // Every midpoint between neighbouring finite codes (the ties), and just either side of it.
  for (int bits = 0; bits < 0x7e; ++bits) {
    const float low = e4m3_bits_to_float(static_cast<std::uint8_t>(bits));
    const float high = e4m3_bits_to_float(static_cast<std::uint8_t>(bits + 1));
    const float middle = 0.5f * (low + high);
    for (const float v : {middle, std::nextafter(middle, 0.0f), std::nextafter(middle, 1000.0f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) values.push_back((i % 2 != 0 ? -1.0f : 1.0f) * std::exp2(exponent(rng)));
  for (const float value : values) {
    ASSERT_EQ(float_to_e4m3_bits(value), brute_force(value)) << "value " << value;
  }
}

TEST(E4m3, SaturatesAndKeepsNan) {
  EXPECT_EQ(float_to_e4m3_bits(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(463.9f), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(464.0f), 0x7e);  // the tie between 448 and (non-finite) 480
  EXPECT_EQ(float_to_e4m3_bits(1.0e6f), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(float_to_e4m3_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float_to_e4m3_bits(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3_bits(1.0625f), 0x38);                                       // tie 1 / 1.125: even → 1
  EXPECT_EQ(float_to_e4m3_bits(1.1875f), 0x3a);                                       // tie 1.125 / 1.25: even → 1.25
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -10)), 0x00);                         // tie 0 / 2^-9 → 0
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(3.0f, -10)), 0x02);                         // tie 2^-9 / 2^-8 → 2^-8
  EXPECT_EQ(float_to_e4m3_bits(std::ldexp(1.0f, -6) - std::ldexp(1.0f, -11)), 0x08);  // up to the smallest normal
}

}  // namespace
}  // namespace attnsuite
