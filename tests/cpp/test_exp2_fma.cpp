// exp2_fma (src/cuda/common/exp2_fma.hpp), the softmax's 2^x on the FMA pipe, checked on the
// CPU: the header runs the same float operations on host and device, so these are the values
// the kernels compute (up to their flushing of denormal results to zero).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cuda/common/exp2_fma.hpp"

namespace {

using attnsuite::cuda::exp2_fma;

float from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Every 61st float from 0 down to -126 (about 17 million inputs, each binade's ends included by
// the stride's coprimality with 2^23), and the same above 0 up to 1 (the softmax's argument can
// exceed 0 by a rounding).
TEST(Exp2Fma, RelativeErrorIsWithinThePolynomialsBound) {
  double worst = 0.0;
  float worst_at = 0.0f;
  auto check = [&](float x) {
    const double exact = std::exp2(static_cast<double>(x));
    const double error = std::fabs(static_cast<double>(exp2_fma(x)) / exact - 1.0);
    if (!(error <= worst)) {
      worst = error;
      worst_at = x;
    }
  };
  const std::uint32_t minus_126 = 0xC2FC0000u, minus_zero = 0x80000000u, one = 0x3F800000u;
  for (std::uint32_t bits = minus_zero; bits <= minus_126; bits += 61) check(from_bits(bits));
  for (std::uint32_t bits = 0; bits <= one; bits += 61) check(from_bits(bits));
  for (const float x : {-126.0f, -125.5f, -0.5f, -0.49999997f, 0.5f, 1.0f, -1.0f, -2.5f}) check(x);
  // The fit's own bound is 7.49e-5; float evaluation and the final multiply add a few ulps.
  EXPECT_LT(worst, 7.6e-5) << "worst at x = " << worst_at;
  EXPECT_GT(worst, 7.0e-5) << "the bound is the polynomial's: it is reached";
}

TEST(Exp2Fma, MaskedScoresGiveExactlyZero) {
  EXPECT_EQ(exp2_fma(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp2_fma(-127.0f), 0.0f);
  EXPECT_EQ(exp2_fma(-1e30f), 0.0f);
  EXPECT_EQ(exp2_fma(-std::numeric_limits<float>::max()), 0.0f);
  // Just above the clamp the result is 2^-127 or so: a denormal, not 0, on the host.
  EXPECT_GT(exp2_fma(-126.4f), 0.0f);
}

TEST(Exp2Fma, NanStaysNan) {
  EXPECT_TRUE(std::isnan(exp2_fma(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp2_fma(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp2_fma(from_bits(0x7F800001u))));  // a signalling NaN's bits
}

TEST(Exp2Fma, IsMonotoneAcrossTheRoundingBoundaries) {
  // Where round(x) steps (x = k + 1/2) the fraction jumps from +1/2 to -1/2: both sides must give
  // nearly the same value, or P's rows would get a seam.
  for (int k = -125; k <= 0; ++k) {
    const float at = static_cast<float>(k) - 0.5f;
    const float below = std::nextafter(at, -200.0f), above = std::nextafter(at, 200.0f);
    EXPECT_LE(exp2_fma(below), exp2_fma(above) * (1.0f + 2e-4f)) << "at " << at;
    EXPECT_NEAR(exp2_fma(at) / std::exp2(static_cast<double>(at)), 1.0, 7.6e-5) << "at " << at;
  }
}

}  // namespace
