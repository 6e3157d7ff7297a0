// Vectorized math for the CPU kernels (AVX2 + FMA; the library is built for x86-64-v3).
#pragma once

#include <immintrin.h>

namespace attnsuite::cpu::simd {

// 2^x for 8 floats. Cephes' exp2f: x = n + f with n = round(x), |f| <= 1/2,
// 2^f = 1 + f·P(f) (degree-6 polynomial, max relative error 1.7e-7), 2^n put into the exponent.
// Inputs below -127 (including -inf) give exactly 0, which the online softmax relies on for
// masked scores and for the first rescale from a running max of -inf. NaN gives NaN, so a NaN
// in Q, K or V reaches the output as in PyTorch: MAXPS returns its second operand when either
// is NaN, hence the clamp's operand order (the other order turned NaN scores into weights of 0
// and NaN inputs into finite outputs). Inputs must be <= 128; the softmax only ever passes
// x <= 0.
inline __m256 exp2_ps(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  // (n + 127) << 23 is the float 2^n; n = -127 gives the bits of +0.
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23)));
}

// e^x = 2^(x·log2 e), same accuracy and the same -inf -> 0 rule.
inline __m256 exp_ps(__m256 x) {
  return exp2_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)));
}

inline float reduce_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline float reduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace attnsuite::cpu::simd
