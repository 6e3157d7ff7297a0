// The PTX that sage's Hopper path (wgmma_kernel.cuh) adds to the Hopper layer's (cuda/hopper/
// primitives.cuh, fp8_primitives.cuh): the INT8 wgmma with an s32 accumulator. Checked against
// the PTX ISA, "wgmma.mma_async" (integer variant):
//   wgmma.mma_async.sync.aligned.shape{.satfinite}.s32.atype.btype  d, a-desc, b-desc, scale-d;
//   .shape includes .m64n128k32 (the integer shapes are a subset of N: 8..224, n128 among them),
//   .atype/.btype in {.s8, .u8};
// no imm-scale-a/-b (negation exists only for the floating-point variants) and no imm-trans
// (transpose only for .f16/.bf16): both operands K-major, as TMA writes INT8 Q and K (head_dim
// bytes contiguous per row). The s32 accumulator has the fragment layout of the f32 one (PTX ISA
// "Register fragments for wgmma .m64nNk32": D row 16·(t / 32) + (t % 32) / 4 + 8h, column
// 8i + 2·(t % 4) + e in register 4i + 2h + e). Without .satfinite the sum wraps; |Σ q·k| <=
// 127²·128 < 2^21 cannot. Only compiled for sm_90a.
#pragma once

#include <cstdint>

#include "cuda/hopper/fp8_primitives.cuh"

namespace attnsuite::cuda::sage::wgmma {

using namespace hopper;  // the wrappers of hopper/primitives.cuh, fp8_primitives.cuh

// acc (64×N s32, raw bits) (+)= A (64×32 s8) · B (N×32 s8), both K-major in shared memory by
// descriptor (the same 8-bit layouts and descriptors as flash3-fp8's e4m3 Q·Kᵀ).
// accumulate = 0 overwrites acc (scale-d false).
template <int kN>
__device__ __forceinline__ void wgmma_ss_s8(std::uint32_t (&acc)[kN / 2], std::uint64_t a_descriptor,
                                            std::uint64_t b_descriptor, int accumulate);

// clang-format off
#define SAGE_WGMMA_OUT4(i) "+r"(acc[i]), "+r"(acc[(i) + 1]), "+r"(acc[(i) + 2]), "+r"(acc[(i) + 3])
#define SAGE_WGMMA_OUT16(i) SAGE_WGMMA_OUT4(i), SAGE_WGMMA_OUT4((i) + 4), SAGE_WGMMA_OUT4((i) + 8), SAGE_WGMMA_OUT4((i) + 12)
#define SAGE_WGMMA_OUT64 SAGE_WGMMA_OUT16(0), SAGE_WGMMA_OUT16(16), SAGE_WGMMA_OUT16(32), SAGE_WGMMA_OUT16(48)

// S = Q·Kᵀ with N = kTileN = 128: operands 0..63 the accumulator (FLASH3_ACC64 names them),
// 64 a-desc, 65 b-desc, 66 accumulate.
template <>
__device__ __forceinline__ void wgmma_ss_s8<128>(std::uint32_t (&acc)[64], std::uint64_t a_descriptor,
                                                 std::uint64_t b_descriptor, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred accumulate;\n"
      "setp.ne.b32 accumulate, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " FLASH3_ACC64 ", %64, %65, accumulate;\n"
      "}\n"
      : SAGE_WGMMA_OUT64
      : "l"(a_descriptor), "l"(b_descriptor), "r"(accumulate));
}

// The first k-step of S (scale-d false: acc is written, never read), with acc as write-only
// operands: S's registers are then dead from its dequantization to the next tile's Q·Kᵀ
// instead of being carried through the softmax and P·V as inputs of this asm. Early-clobber, so
// that no output shares a register with the descriptors. (PTX ISA: scale-d is a predicate
// operand; the immediate 0 is false, D = A·B.)
#define SAGE_WGMMA_NEW4(i) "=&r"(acc[i]), "=&r"(acc[(i) + 1]), "=&r"(acc[(i) + 2]), "=&r"(acc[(i) + 3])
#define SAGE_WGMMA_NEW16(i) SAGE_WGMMA_NEW4(i), SAGE_WGMMA_NEW4((i) + 4), SAGE_WGMMA_NEW4((i) + 8), SAGE_WGMMA_NEW4((i) + 12)
#define SAGE_WGMMA_NEW64 SAGE_WGMMA_NEW16(0), SAGE_WGMMA_NEW16(16), SAGE_WGMMA_NEW16(32), SAGE_WGMMA_NEW16(48)
__device__ __forceinline__ void wgmma_ss_s8_first(std::uint32_t (&acc)[64], std::uint64_t a_descriptor,
                                                  std::uint64_t b_descriptor) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " FLASH3_ACC64 ", %64, %65, 0;\n"
      : SAGE_WGMMA_NEW64
      : "l"(a_descriptor), "l"(b_descriptor));
}
#undef SAGE_WGMMA_NEW64
#undef SAGE_WGMMA_NEW16
#undef SAGE_WGMMA_NEW4

#undef SAGE_WGMMA_OUT64
#undef SAGE_WGMMA_OUT16
#undef SAGE_WGMMA_OUT4
// clang-format on

}  // namespace attnsuite::cuda::sage::wgmma
