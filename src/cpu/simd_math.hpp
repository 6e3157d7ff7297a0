// Vectorized math for the CPU kernels. The functions on __m256 are AVX2 + FMA (the library is
// built for x86-64-v3); Avx2 and Avx512 below are the same operations as vector policies, so a
// kernel written once as a template over the policy runs 8 or 16 lanes (core/isa.hpp says how a
// kernel is built and dispatched for both).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>

#include "core/simd_target.hpp"

namespace attnsuite::cpu::simd {

// P of exp2_ps below (Cephes' exp2f), highest degree first, evaluated by Horner's rule.
inline constexpr float kExp2Polynomial[] = {1.535336188319500e-4f,
                                            1.339887440266574e-3f,
                                            9.618437357674640e-3f,
                                            5.550332471162809e-2f,
                                            2.402264791363012e-1f,
                                            6.931472028550421e-1f,
                                            1.0f};

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
  __m256 p = _mm256_set1_ps(kExp2Polynomial[0]);
  for (std::size_t i = 1; i < std::size(kExp2Polynomial); ++i)
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2Polynomial[i]));
  // (n + 127) << 23 is the float 2^n; n = -127 gives the bits of +0.
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23)));
}

// e^x = 2^(x·log2 e), same accuracy and the same -inf -> 0 rule.
inline __m256 exp_ps(__m256 x) { return exp2_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f))); }

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

// --- Vector policies ----------------------------------------------------------------------------
// Vec, kLanes and the operations the kernels use, with the same arithmetic in both: exp2 is
// the polynomial above lane by lane, so a kernel that sums in the same order gives bitwise the
// same results with either. Aligned load/store need 32 (Avx2) or 64 (Avx512) byte addresses;
// HostBuffer gives 64.

struct Avx2 {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  static constexpr const char* kName = "avx2";

  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec set1(float value) { return _mm256_set1_ps(value); }
  static Vec broadcast(const float* value) { return _mm256_broadcast_ss(value); }
  static Vec load(const float* p) { return _mm256_load_ps(p); }
  static Vec loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec v) { _mm256_store_ps(p, v); }
  static void storeu(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }  // a·b + c
  // max(a, b) lane by lane; a NaN in either gives b (MAXPS), so put the value that may be NaN
  // second to carry it.
  static Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  static Vec exp2(Vec x) { return exp2_ps(x); }
  static float reduce_add(Vec v) { return simd::reduce_add(v); }
  static float reduce_max(Vec v) { return simd::reduce_max(v); }
  // 0 where v is -inf, v elsewhere: the exponent base of a softmax row that has seen no key.
  static Vec zero_where_minus_inf(Vec v) {
    return _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_set1_ps(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ), v);
  }
  // -inf in the lanes whose key is outside [begin, end) (32-byte aligned int32 arrays), v elsewhere.
  static Vec hide_outside(Vec v, const std::int32_t* begin, const std::int32_t* end, std::int32_t key) {
    const __m256i k = _mm256_set1_epi32(key);
    const __m256i before = _mm256_cmpgt_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(begin)), k);
    const __m256i inside_end = _mm256_cmpgt_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(end)), k);
    // hidden = key < begin || key >= end  ==  begin > key || !(end > key)
    const __m256i hidden = _mm256_or_si256(before, _mm256_xor_si256(inside_end, _mm256_set1_epi32(-1)));
    return _mm256_blendv_ps(v, _mm256_set1_ps(-std::numeric_limits<float>::infinity()), _mm256_castsi256_ps(hidden));
  }
};

// Each function carries the AVX-512 target itself (simd_target.hpp), so this header can be
// included anywhere; only code compiled for AVX-512 can call them inline.
struct Avx512 {
  using Vec = __m512;
  static constexpr int kLanes = 16;
  static constexpr const char* kName = "avx512";

  ATTNSUITE_TARGET_AVX512 static Vec zero() { return _mm512_setzero_ps(); }
  ATTNSUITE_TARGET_AVX512 static Vec set1(float value) { return _mm512_set1_ps(value); }
  ATTNSUITE_TARGET_AVX512 static Vec broadcast(const float* value) { return _mm512_set1_ps(*value); }
  ATTNSUITE_TARGET_AVX512 static Vec load(const float* p) { return _mm512_load_ps(p); }
  ATTNSUITE_TARGET_AVX512 static Vec loadu(const float* p) { return _mm512_loadu_ps(p); }
  ATTNSUITE_TARGET_AVX512 static void store(float* p, Vec v) { _mm512_store_ps(p, v); }
  ATTNSUITE_TARGET_AVX512 static void storeu(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  ATTNSUITE_TARGET_AVX512 static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  ATTNSUITE_TARGET_AVX512 static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  ATTNSUITE_TARGET_AVX512 static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  ATTNSUITE_TARGET_AVX512 static Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  // VMAXPS has the same NaN rule at every width: a NaN in either operand gives the second.
  ATTNSUITE_TARGET_AVX512 static Vec max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  // exp2_ps above, 16 lanes: the same clamp, rounding, polynomial and exponent insertion.
  ATTNSUITE_TARGET_AVX512 static Vec exp2(Vec x) {
    x = _mm512_max_ps(_mm512_set1_ps(-127.0f), x);
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(kExp2Polynomial[0]);
    for (std::size_t i = 1; i < std::size(kExp2Polynomial); ++i)
      p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Polynomial[i]));
    const __m512i biased = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(biased, 23)));
  }
  ATTNSUITE_TARGET_AVX512 static float reduce_add(Vec v) {
    const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return simd::reduce_add(half);
  }
  ATTNSUITE_TARGET_AVX512 static float reduce_max(Vec v) {
    const __m256 half = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return simd::reduce_max(half);
  }
  ATTNSUITE_TARGET_AVX512 static Vec zero_where_minus_inf(Vec v) {
    const __mmask16 minus_inf =
        _mm512_cmp_ps_mask(v, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ);
    return _mm512_mask_mov_ps(v, minus_inf, _mm512_setzero_ps());
  }
  // begin and end 64-byte aligned.
  ATTNSUITE_TARGET_AVX512 static Vec hide_outside(Vec v, const std::int32_t* begin, const std::int32_t* end,
                                                  std::int32_t key) {
    const __m512i k = _mm512_set1_epi32(key);
    const __mmask16 before = _mm512_cmpgt_epi32_mask(_mm512_load_si512(begin), k);
    const __mmask16 at_or_after_end = _mm512_cmple_epi32_mask(_mm512_load_si512(end), k);
    return _mm512_mask_mov_ps(v, static_cast<__mmask16>(before | at_or_after_end),
                              _mm512_set1_ps(-std::numeric_limits<float>::infinity()));
  }
};

}  // namespace attnsuite::cpu::simd
