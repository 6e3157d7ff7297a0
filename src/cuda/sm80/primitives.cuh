// The PTX instructions the mma.sync kernels (flash2, sage) are built from, named after what they
// do: cp.async, ldmatrix, the 16-bit, INT8 and FP8 m16n8 MMAs, and the architecture-neutral
// helpers the Hopper kernels share (shared-window addresses, 16-bit packing in fragment order,
// exp2 on the SFU, reductions over a fragment row's quad). sm_80+ (the FP8 MMA: sm_89+).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace attnsuite::cuda::sm80 {

__device__ __forceinline__ std::uint32_t shared_address(const void* pointer) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16 bytes global → shared without passing through registers. With valid == false nothing is
// read (src-size 0) and the 16 bytes are zero-filled: edge rows cost no branch and feed zeros.
// shared_dst is a shared-window byte address (shared_address()).
__device__ __forceinline__ void copy_16_bytes_async(std::uint32_t shared_dst, const void* global_src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_dst), "l"(global_src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void commit_async_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_async_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8×8 b16 matrices from shared memory; lane i gives the row address (a shared-window
// byte address) of matrix i / 8.
__device__ __forceinline__ void load_matrix_x4(std::uint32_t (&frag)[4], std::uint32_t row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(frag[0]), "=r"(frag[1]), "=r"(frag[2]), "=r"(frag[3])
               : "r"(row_address));
}
// The same, each matrix transposed (V as the k-major B operand of P·V).
__device__ __forceinline__ void load_matrix_x4_transposed(std::uint32_t (&frag)[4], std::uint32_t row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(frag[0]), "=r"(frag[1]), "=r"(frag[2]), "=r"(frag[3])
               : "r"(row_address));
}

// stmatrix (sm_90): ldmatrix's inverse — lanes 8i .. 8i + 7 address the rows of 8×8 matrix i,
// whose 16-bit pairs each lane holds in frag[i] in the accumulator's layout (row lane / 4, columns
// 2·(lane % 4) and the next).
__device__ __forceinline__ void store_matrix_x4(std::uint32_t row_address, const std::uint32_t (&frag)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row_address), "r"(frag[0]),
               "r"(frag[1]), "r"(frag[2]), "r"(frag[3])
               : "memory");
}

// ACC (16×8) += A (row-major fragment) · B (k-major fragment B0, B1) by one
// `mma.sync.aligned.SHAPE_AND_TYPES`: ACC's 4 registers (CONSTRAINT "+f" or "+r") are C and D.
#define ATTNSUITE_SM80_MMA(SHAPE_AND_TYPES, CONSTRAINT, ACC, A, B0, B1)                         \
  asm volatile("mma.sync.aligned." SHAPE_AND_TYPES                                              \
               " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "                                \
               "{%0, %1, %2, %3};\n"                                                            \
               : CONSTRAINT(ACC[0]), CONSTRAINT(ACC[1]), CONSTRAINT(ACC[2]), CONSTRAINT(ACC[3]) \
               : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B0), "r"(B1))

// acc (16×8 fp32) += A (16×16, row-major fragment) · B (16×8, k-major fragment).
template <class Element>
__device__ __forceinline__ void mma_16x8x16(float (&acc)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                            std::uint32_t b1);

template <>
__device__ __forceinline__ void mma_16x8x16<__half>(float (&acc)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                                    std::uint32_t b1) {
  ATTNSUITE_SM80_MMA("m16n8k16.row.col.f32.f16.f16.f32", "+f", acc, a, b0, b1);
}

template <>
__device__ __forceinline__ void mma_16x8x16<__nv_bfloat16>(float (&acc)[4], const std::uint32_t (&a)[4],
                                                           std::uint32_t b0, std::uint32_t b1) {
  ATTNSUITE_SM80_MMA("m16n8k16.row.col.f32.bf16.bf16.f32", "+f", acc, a, b0, b1);
}

// mma_16x8x16<Element> as a callable (the `mma` of sm80/tile.cuh's loops).
template <class Element>
struct Mma16x8x16 {
  __device__ __forceinline__ void operator()(float (&acc)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                             std::uint32_t b1) const {
    mma_16x8x16<Element>(acc, a, b0, b1);
  }
};

// Two floats rounded to the 16-bit type, packed low-first (the mma fragment order).
template <class Element>
__device__ __forceinline__ std::uint32_t pack_pair(float low, float high);

template <>
__device__ __forceinline__ std::uint32_t pack_pair<__half>(float low, float high) {
  const __half2 pair = __floats2half2_rn(low, high);
  return *reinterpret_cast<const std::uint32_t*>(&pair);
}

template <>
__device__ __forceinline__ std::uint32_t pack_pair<__nv_bfloat16>(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const std::uint32_t*>(&pair);
}

// Half e (0: low, 1: high) of a pack_pair, back to fp32 (exact).
template <class Element>
__device__ __forceinline__ float unpack_half(std::uint32_t pair, int e);

template <>
__device__ __forceinline__ float unpack_half<__half>(std::uint32_t pair, int e) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(e == 0 ? pair & 0xffffu : pair >> 16)));
}

template <>
__device__ __forceinline__ float unpack_half<__nv_bfloat16>(std::uint32_t pair, int e) {
  return __uint_as_float(e == 0 ? pair << 16 : pair & 0xffff0000u);
}

// 2^x with the SFU (ex2.approx, 2 ulp); 2^-inf = 0, which masked scores rely on.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Reductions over the 4 lanes of a quad: they hold the same fragment row.
__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}
__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}

// ---- 8-bit MMAs (sage) ---------------------------------------------------------------------------
// The FP8 ones exist on sm_89 and later; compiled for an older architecture they trap (sage2's
// supports() refuses such a build).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define ATTNSUITE_SAGE_HAVE_FP8_MMA 1
#else
#define ATTNSUITE_SAGE_HAVE_FP8_MMA 0
#endif

// acc (16×8 s32) += A (16×32 s8, row) · B (32×8 s8, col).
__device__ __forceinline__ void mma_s8_16x8x32(int (&acc)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                               std::uint32_t b1) {
  ATTNSUITE_SM80_MMA("m16n8k32.row.col.s32.s8.s8.s32", "+r", acc, a, b0, b1);
}

// d (16×8 f32) = A (16×32 e4m3, row) · B (32×8 e4m3, col), into a fresh accumulator: the
// first level of sage2's two-level accumulation.
__device__ __forceinline__ void mma_e4m3_16x8x32_fresh(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                                       std::uint32_t b1) {
#if ATTNSUITE_SAGE_HAVE_FP8_MMA
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
#else
  d[0] = d[1] = d[2] = d[3] = 0.0f;
  __trap();
#endif
}
// acc (16×8 f32) += A · B, e4m3.
__device__ __forceinline__ void mma_e4m3_16x8x32(float (&acc)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                                 std::uint32_t b1) {
#if ATTNSUITE_SAGE_HAVE_FP8_MMA
  ATTNSUITE_SM80_MMA("m16n8k32.row.col.f32.e4m3.e4m3.f32", "+f", acc, a, b0, b1);
#else
  __trap();
#endif
}

#undef ATTNSUITE_SM80_MMA

// Two floats → two e4m3 bytes (round to nearest even, saturating), `low` in the low byte.
__device__ __forceinline__ std::uint32_t pack_e4m3_pair(float low, float high) {
  return static_cast<std::uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(low, high), __NV_SATFINITE, __NV_E4M3));
}

}  // namespace attnsuite::cuda::sm80
