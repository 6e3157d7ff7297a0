// The 8-bit PTX of the Hopper kernels (flash3-fp8, sage2's wgmma kernel) beside primitives.cuh:
// e4m3 wgmma (k = 32), descriptors with a 64-byte swizzle, fp32 → e4m3 conversion in the register order of the 8-bit A
// fragment, the generic → async proxy fence and the byte transpose of V in shared memory. Checked against the PTX ISA
// sections "Matrix Fragments for wgmma.mma_async.m64nNk32", "Matrix Descriptor Format", cvt (.e4m3x2) and membar/fence
// (fence.proxy.async). Only compiled for sm_90a.
#pragma once

#include <cstdint>

#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::hopper {

// ---- Shared-memory layout helpers -----------------------------------------------------------

// The TMA / wgmma swizzle as a function of the byte offset from a tile base aligned to the
// pattern's period (1024 bytes for 128B, 512 for 64B): the 16-byte chunk index (bits 4-6, or
// 4-5) is XORed with the row within the period (bits 7-9, or 7-8).
template <int kSwizzleBytes>
__device__ __forceinline__ std::uint32_t swizzle(std::uint32_t offset) {
  static_assert(kSwizzleBytes == 128 || kSwizzleBytes == 64, "128B or 64B swizzle");
  constexpr std::uint32_t kMask = kSwizzleBytes == 128 ? 0x70u : 0x30u;
  return offset ^ ((offset >> 3) & kMask);
}

// A matrix descriptor (primitives.cuh's matrix_descriptor) with the swizzle mode in bits 62-63:
// 1 = 128B, 2 = 64B.
template <int kSwizzleBytes>
__device__ __forceinline__ std::uint64_t matrix_descriptor_swizzled(std::uint32_t address, std::uint32_t leading_bytes,
                                                                    std::uint32_t stride_bytes) {
  constexpr std::uint64_t kMode = kSwizzleBytes == 128 ? 1 : 2;
  return static_cast<std::uint64_t>((address & 0x3FFFF) >> 4) |
         static_cast<std::uint64_t>((leading_bytes & 0x3FFFF) >> 4) << 16 |
         static_cast<std::uint64_t>((stride_bytes & 0x3FFFF) >> 4) << 32 | kMode << 62;
}

// Makes this thread's generic-proxy writes to shared memory (the transposed V) visible to the
// async proxy (wgmma reads its B operand through it); before the mbarrier arrive that releases them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ uint4 load_shared_16(std::uint32_t address) {
  uint4 value;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
               : "r"(address)
               : "memory");
  return value;
}
__device__ __forceinline__ void store_shared_4(std::uint32_t address, std::uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(address), "r"(value) : "memory");
}

// ---- fp32 → e4m3 -------------------------------------------------------------------------------

// Four fp32 values as four e4m3 bytes, `a` in the lowest byte (round to nearest even,
// saturating to ±448). cvt's e4m3x2 puts its first source in the upper byte.
__device__ __forceinline__ std::uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  std::uint16_t low, high;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(low) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(high) : "f"(d), "f"(c));
  return static_cast<std::uint32_t>(low) | static_cast<std::uint32_t>(high) << 16;
}

// ---- e4m3 wgmma (k = 32) --------------------------------------------------------------------------

// acc (64×N fp32, the same accumulator layout as k16) (+)= A · B for one k-step of 32 e4m3:
//   wgmma_ss_e4m3: A (64×32) and B (N×32) in shared memory, both K-major (8-bit wgmma has no
//                  transpose: imm-trans operands do not exist for .e4m3);
//   wgmma_rs_e4m3: A from registers — thread t of the warpgroup holds in a[r], byte v (lowest
//                  first), row 16·(t / 32) + (t % 32) / 4 + 8·(r % 2), column
//                  4·(t % 4) + 16·(r / 2) + v — and B (N×32) K-major in shared memory.
template <int kN>
__device__ __forceinline__ void wgmma_ss_e4m3(float (&acc)[kN / 2], std::uint64_t a_descriptor,
                                              std::uint64_t b_descriptor, int accumulate);
template <int kN>
__device__ __forceinline__ void wgmma_rs_e4m3(float (&acc)[kN / 2], const std::uint32_t (&a)[4],
                                              std::uint64_t b_descriptor, int accumulate);

// clang-format off
// SS: "d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b".
#define FLASH3_DEFINE_WGMMA_SS_E4M3(N, ACC, OUTS, A_DESC, B_DESC, ACCUMULATE)                                      \
  template <>                                                                                                      \
  __device__ __forceinline__ void wgmma_ss_e4m3<N>(float(&acc)[(N) / 2], std::uint64_t a_descriptor,               \
                                                   std::uint64_t b_descriptor, int accumulate) {                   \
    FLASH3_WGMMA("wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3", ACC, A_DESC, B_DESC, ACCUMULATE,      \
                 "1, 1", OUTS : "l"(a_descriptor), "l"(b_descriptor), "r"(accumulate));                            \
  }
// RS: "d, a, b-desc, scale-d, imm-scale-a, imm-scale-b".
#define FLASH3_DEFINE_WGMMA_RS_E4M3(N, ACC, OUTS, A_REGS, B_DESC, ACCUMULATE)                                      \
  template <>                                                                                                      \
  __device__ __forceinline__ void wgmma_rs_e4m3<N>(float(&acc)[(N) / 2], const std::uint32_t(&a)[4],               \
                                                   std::uint64_t b_descriptor, int accumulate) {                   \
    FLASH3_WGMMA("wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3", ACC, A_REGS, B_DESC, ACCUMULATE,      \
                 "1, 1", OUTS : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_descriptor), "r"(accumulate));   \
  }

// S = Q·Kᵀ with N = kTileN (128); O += P·V with N = head dim (64, 128).
FLASH3_DEFINE_WGMMA_SS_E4M3(128, FLASH3_ACC64, FLASH3_OUT64, "%64", "%65", "%66")
FLASH3_DEFINE_WGMMA_RS_E4M3(64, FLASH3_ACC32, FLASH3_OUT32, "{%32, %33, %34, %35}", "%36", "%37")
FLASH3_DEFINE_WGMMA_RS_E4M3(128, FLASH3_ACC64, FLASH3_OUT64, "{%64, %65, %66, %67}", "%68", "%69")

#undef FLASH3_DEFINE_WGMMA_RS_E4M3
#undef FLASH3_DEFINE_WGMMA_SS_E4M3
// clang-format on

}  // namespace attnsuite::cuda::hopper
