// The element functions of the device-capable input generators, written once for the host and
// the GPU so that both produce bitwise the same inputs: the GPU fills the benchmark's device
// tensors in place (no upload), the host fills the copy that the fp64 reference reads.
//
// Bitwise agreement needs the same IEEE double operations in the same order on both sides: no
// libm (glibc's log/sin and CUDA's differ in the last bit now and then), only +, ×, ÷, sqrt,
// floor and frexp, which IEEE rounds exactly; on the device through the _rn intrinsics, which
// nvcc never fuses into FMAs; on the host in a file compiled with -ffp-contract=off
// (generators.cpp). log and sin/cos are series accurate to ~1e-16 relative (tests compare them
// with libm), so the distributions are what their names say.
#pragma once

#include <cmath>
#include <cstdint>

#include "attnsuite/generator_kind.hpp"

#if defined(__CUDACC__)
#define ATTNSUITE_HD __host__ __device__
#else
#define ATTNSUITE_HD
#endif

namespace attnsuite::bench::genmath {

ATTNSUITE_HD inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
ATTNSUITE_HD inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
ATTNSUITE_HD inline double sub(double a, double b) { return add(a, -b); }

// c_n·x^n + … + c_1·x + c_0 by Horner's rule, through add and mul: horner(x, c_n, …, c_1, c_0).
template <class... Coefficients>
ATTNSUITE_HD inline double horner(double x, double highest, Coefficients... lower) {
  double p = highest;
  ((p = add(mul(p, x), lower)), ...);
  return p;
}

// splitmix64: a counter-based generator, so element i needs no state from element i-1.
ATTNSUITE_HD inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// (0, 1], never 0 so that log() is finite; exact (53 bits, power-of-two scale).
ATTNSUITE_HD inline double unit_open(std::uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

// Natural log of u in (0, 1]: u = m·2^e with m in [√½, √2), ln m = 2·atanh(t), t = (m−1)/(m+1),
// |t| ≤ 0.172, series to t²¹ (next term < 2e-19).
ATTNSUITE_HD inline double log_unit(double u) {
  int e = 0;
  double m = std::frexp(u, &e);  // m in [0.5, 1)
  if (m < 0.70710678118654752) {
    m = mul(m, 2.0);
    e -= 1;
  }
  const double t = (m - 1.0) / (m + 1.0);  // both exact-rounded IEEE ops
  const double t2 = mul(t, t);
  const double p = horner(t2, 1.0 / 21.0, 1.0 / 19.0, 1.0 / 17.0, 1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0, 1.0 / 9.0,
                          1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0, 1.0);
  return add(mul(static_cast<double>(e), 0.69314718055994531), mul(mul(2.0, t), p));
}

// sin and cos of 2π·u for u in [0, 1]: u·8 splits the turn into octants (exact), the angle is
// the octant's centre (2k+1)·π/8 plus r in [−π/8, π/8), whose sin/cos are Taylor series to r¹⁷.
ATTNSUITE_HD inline void sincos_turn(double u, double* sin_out, double* cos_out) {
  const double x = mul(u, 8.0);
  const double k = std::floor(x);
  const double r = mul(sub(sub(x, k), 0.5), 0.78539816339744831);  // π/4
  const double r2 = mul(r, r);
  // In r², highest degree first: ±1/k! for k = 17, 15, …, 3, 1 (sin r / r) and 16, 14, …, 2, 0 (cos r).
  const double sin_r = mul(horner(r2, 1.0 / 355687428096000.0, -1.0 / 1307674368000.0, 1.0 / 6227020800.0,
                                  -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0),
                           r);
  const double cos_r = horner(r2, 1.0 / 20922789888000.0, -1.0 / 87178291200.0, 1.0 / 479001600.0, -1.0 / 3628800.0,
                              1.0 / 40320.0, -1.0 / 720.0, 1.0 / 24.0, -0.5, 1.0);
  // sin/cos of (2k+1)·π/8, k = 0..7.
  constexpr double kS = 0.38268343236508977, kC = 0.92387953251128674;  // sin, cos of π/8
  const double centre_sin[8] = {kS, kC, kC, kS, -kS, -kC, -kC, -kS};
  const double centre_cos[8] = {kC, kS, -kS, -kC, -kC, -kS, kS, kC};
  const int octant = static_cast<int>(k) & 7;
  const double cs = centre_sin[octant], cc = centre_cos[octant];
  *sin_out = add(mul(cs, cos_r), mul(cc, sin_r));
  *cos_out = sub(mul(cc, cos_r), mul(cs, sin_r));
}

// The per-tensor key of stream t (0 = Q, 1 = K, 2 = V) of a generator for `seed`.
ATTNSUITE_HD inline std::uint64_t tensor_key(Kind kind, std::uint64_t seed, std::uint64_t t) {
  return kind == Kind::Randn ? mix(seed ^ (t + 1) * 0xd1b54a32d192ed03ull)
                             : mix(seed ^ (t + 11) * 0x632be59bd9b4e019ull);
}

// Element i (dense (b, s, h, d) order) of a tensor with key `key`.
ATTNSUITE_HD inline float value(Kind kind, std::uint64_t key, std::uint64_t i) {
  if (kind == Kind::Uniform) return static_cast<float>(sub(mul(2.0, unit_open(mix(key + i))), 1.0));
  // Box–Muller on pairs (2j, 2j+1); both halves of a pair come from counter j.
  const std::uint64_t pair = i / 2;
  const double radius = std::sqrt(mul(-2.0, log_unit(unit_open(mix(key + 2 * pair)))));
  double s = 0.0, c = 0.0;
  sincos_turn(unit_open(mix(key + 2 * pair + 1)), &s, &c);
  return static_cast<float>(mul(radius, (i & 1) ? s : c));
}

}  // namespace attnsuite::bench::genmath
