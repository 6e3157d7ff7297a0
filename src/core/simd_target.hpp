// Compiling AVX-512 code inside a build for x86-64-v3, without -march=native and without
// compiling a whole file with -mavx512f.
//
// Why not a per-file -mavx512f: every inline function and template instantiation such a file
// emits out of line (std::vector's, fmt's, AttentionProblem's members...) would be compiled
// for AVX-512 too, and the linker keeps one copy of each across the library, possibly that one:
// an AVX2-only CPU then dies of SIGILL far from any kernel. So instead the AVX-512 code sits in
// a region that gives only the functions defined inside it the AVX-512 target, after every
// header is included (include guards keep the headers' functions outside):
//
//   #include "cpu/flash/forward.hpp"  // ...and everything the kernel header includes
//   ATTNSUITE_AVX512_BEGIN
//   #include "cpu/flash/forward_kernel.hpp"  // templates over the vector policy
//   ATTNSUITE_AVX512_END
//
// Functions outside a region that need AVX-512 (the vector policy simd::Avx512, the peak probe)
// carry ATTNSUITE_TARGET_AVX512 one by one. tests/cpp checks the built objects: no function that
// the linker may merge across files (weak symbols) contains AVX-512 instructions.
#pragma once

// The AVX-512 subset the kernels may use: x86-64-v4's vector extensions.
#define ATTNSUITE_AVX512_FEATURES "avx512f,avx512bw,avx512dq,avx512vl"

#define ATTNSUITE_TARGET_AVX512 __attribute__((target(ATTNSUITE_AVX512_FEATURES)))

// _Pragma takes one string literal: clang-format must not split it.
// clang-format off
#if defined(__clang__)
#define ATTNSUITE_AVX512_BEGIN \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl\"))), apply_to = function)")
#define ATTNSUITE_AVX512_END _Pragma("clang attribute pop")
#elif defined(__GNUC__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports as uninitialized once inlined (GCC bug 105593, fixed in 13).
#define ATTNSUITE_AVX512_BEGIN                                                              \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl\")") \
      _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define ATTNSUITE_AVX512_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")
#else
#error "AVX-512 regions need GCC or clang"
#endif
// clang-format on

// Put before a loop over a register block (`for (int r = 0; r < R; ++r)` with R a constant) so
// that it vanishes and each accumulator of an array `Vec acc[R][C]` gets its own register.
// Without it GCC 12 unrolled cpu-flash's 6×2 AVX2 block late, kept the accumulators in a stack
// array as well and stored all 12 on every step (twice the CPU time), and left the 24 chains of
// the AVX-512 peak probe rolled, in memory (60% of the peak).
#define ATTNSUITE_UNROLL _Pragma("GCC unroll 32")
