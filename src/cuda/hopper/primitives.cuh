// The Hopper (sm_90a) PTX that the warp-specialized kernels (flash3, flash3-fp8, sage's wgmma
// kernel) are built from, named after what it does: mbarriers, TMA tile loads, register reallocation, wgmma and its
// shared-memory matrix descriptors. Every field and operand order below was checked against the PTX ISA sections on
// wgmma (register fragments, shared-memory layouts, matrix descriptor), mbarrier, cp.async.bulk.tensor and setmaxnreg;
// the comments say what each relies on. Only compiled for sm_90a (the kernel's body is guarded by
// __CUDA_ARCH_FEAT_SM90_ALL).
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: nothing of libcuda is linked)

#include <cstdint>

#include "cuda/common/exp2_fma.hpp"
#include "cuda/sm80/primitives.cuh"

namespace attnsuite::cuda::hopper {

// Architecture-neutral helpers of sm80/primitives.cuh: shared-window addresses, 16-bit packing
// in mma fragment order, exp2 on the SFU and reductions over the 4 lanes of a fragment row.
using sm80::exp2_approx;
using sm80::pack_pair;
using sm80::quad_max;
using sm80::quad_sum;
using sm80::shared_address;
using sm80::unpack_half;

// The softmax's 2^x for a score of 8-key group `group` (a compile-time value once the loops are
// unrolled): every kFmaEvery-th group on the FMA pipe (exp2_fma, cuda/common/exp2_fma.hpp),
// the others on MUFU (ex2.approx); kFmaEvery = 0, every config but the "-fmaexp" ones: all MUFU.
template <int kFmaEvery>
__device__ __forceinline__ float softmax_exp2(int group, float x) {
  if constexpr (kFmaEvery > 0)
    if (group % kFmaEvery == kFmaEvery - 1) return exp2_fma(x);
  return exp2_approx(x);
}

// values[0] ∘ values[1] ∘ … ∘ values[kCount - 1] as a balanced tree: ⌈log2 kCount⌉ dependent
// operations instead of kCount - 1, for the softmax's row maximum and sum over a thread's scores
// of a tile. A maximum is exact in any order; a sum's rounding differs from the serial order's by
// the usual float reassociation. Measured on the H200 (sage v5, 2026-12-04): sage2's kernel
// 7–9% faster — the consumers are latency-bound (0.65 eligible warps per scheduler), so a serial
// chain of 32 FMNMX / FADD per row is paid in full. One level per instantiation: a loop over the
// widths (width /= 2) was not unrolled by nvcc 13 and put the array on the stack.
template <int kCount, class T, class Op>
__device__ __forceinline__ T tree_reduce(const T (&values)[kCount], Op op) {
  static_assert(kCount > 0, "at least one value");
  if constexpr (kCount == 1) {
    return values[0];
  } else {
    constexpr int kPairs = kCount / 2, kNext = kCount - kPairs;  // an odd one out moves up alone
    T level[kNext];
#pragma unroll
    for (int i = 0; i < kPairs; ++i) level[i] = op(values[i], values[i + kNext]);
    if constexpr (kNext > kPairs) level[kPairs] = values[kPairs];
    return tree_reduce<kNext>(level, op);
  }
}

// ---- mbarrier (shared-memory transaction barriers) ---------------------------------------------

__device__ __forceinline__ void barrier_init(std::uint32_t barrier, std::uint32_t arrivals) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals) : "memory");
}
// Makes the initialized barriers visible to the other threads and to the async (TMA) proxy;
// a __syncthreads() must follow.
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival plus `bytes` expected transaction bytes: the phase completes when every arrival
// is in and the TMA copies signalling this barrier have delivered `bytes` bytes.
// (The arrival state that both return is not needed: waits go by phase parity.)
__device__ __forceinline__ void barrier_arrive_expect_bytes(std::uint32_t barrier, std::uint32_t bytes) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "}\n" ::"r"(barrier),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void barrier_arrive(std::uint32_t barrier) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(barrier)
      : "memory");
}
// Waits until the phase of parity `parity` has completed. try_wait.parity is valid for the
// current (incomplete) phase, for which it returns false, and the immediately preceding one,
// for which it returns true; a freshly initialized barrier is in phase 0, so waiting for
// parity 1 returns at once (the producer's first pass over the empty barriers).
// (No time-out: a trap anywhere in the consumers' code made ptxas cap their registers near
// the launch bound, 348 bytes of spills and serialized wgmma at d256.)
__device__ __forceinline__ void barrier_wait(std::uint32_t barrier, std::uint32_t parity) {
  std::uint32_t done;
  do {
    asm volatile(
        "{\n"
        ".reg .pred complete;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n"
        "selp.b32 %0, 1, 0, complete;\n"
        "}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  } while (done == 0);
}

// ---- TMA ------------------------------------------------------------------------------------------

// One box of a 4-D tensor map (coordinates innermost first: column, row, head, batch) into
// shared memory at `destination`, completing its bytes on `barrier`. Out-of-bounds elements
// (rows past the sequence end) are written as zeros and still count toward the bytes.
__device__ __forceinline__ void tma_load_4d(std::uint32_t destination, const CUtensorMap* map, int column, int row,
                                            int head, int batch, std::uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(destination),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(column), "r"(row), "r"(head), "r"(batch), "r"(barrier)
      : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory at `source` into
// shared memory at `destination`, completing them on `barrier`: a TMA copy without a tensor map.
__device__ __forceinline__ void bulk_load(std::uint32_t destination, const void* source, std::uint32_t bytes,
                                          std::uint32_t barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(destination),
      "l"(reinterpret_cast<std::uint64_t>(source)), "r"(bytes), "r"(barrier)
      : "memory");
}

// ---- Bulk reductions ----------------------------------------------------------------------------

// `sums`[0 .. bytes / 4) += the fp32 values at shared address `source`, elementwise and atomically,
// by the async proxy, as part of this thread's open bulk group (both 16-byte aligned, bytes a
// multiple of 16). The shared-memory stores it reads must be made visible to the async proxy first
// (fence.proxy.async.shared::cta).
__device__ __forceinline__ void bulk_reduce_add(float* sums, std::uint32_t source, std::uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   reinterpret_cast<std::uint64_t>(sums)),
               "r"(source), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most kPending of this thread's bulk groups still read their shared memory (.read), or
// are still running at all.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---- Register reallocation ----------------------------------------------------------------------

// Executed by all warps of a warpgroup; needs a kernel compiled with a register maximum
// (__launch_bounds__). .dec releases registers to the CTA pool, .inc blocks until it can take them.
template <int kRegisters>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// ---- named barriers (ping-pong between the consumer warpgroups) -------------------------------

// bar.sync / bar.arrive on hardware barrier `id` (1..15; 0 is __syncthreads) for `threads`
// threads (a multiple of 32): sync waits until `threads` have arrived (itself included), arrive
// counts without waiting. Two warpgroups order their GEMM issues with one barrier each: a
// warpgroup syncs on its own (128 of its threads) and arrives on the other's (128 more).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- wgmma --------------------------------------------------------------------------------------

// Shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"):
//   bits 0-13  start address >> 4       bits 16-29 leading dimension byte offset >> 4
//   bits 32-45 stride dimension byte offset >> 4   bits 49-51 base offset (0: every swizzle
//   pattern starts on a 1024-byte boundary, which our slabs do)   bits 62-63 swizzle: 1 = 128B.
// K-major (Q, K): SBO = 1024 (8 rows × 128 B to the next 8 rows), LBO unused ("assumed 1").
// MN-major (V, read transposed): LBO = bytes to the next 64 columns (the next slab), SBO = 1024
// (the next 8 rows along K = keys).
__device__ __forceinline__ std::uint64_t matrix_descriptor(std::uint32_t address, std::uint32_t leading_bytes,
                                                           std::uint32_t stride_bytes) {
  return static_cast<std::uint64_t>((address & 0x3FFFF) >> 4) |
         static_cast<std::uint64_t>((leading_bytes & 0x3FFFF) >> 4) << 16 |
         static_cast<std::uint64_t>((stride_bytes & 0x3FFFF) >> 4) << 32 | std::uint64_t{1} << 62;
}

// Orders this thread's earlier register accesses before the wgmma that follow (required
// before the first wgmma that reads registers written since the last one).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending committed wgmma groups of this warpgroup are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Pins register values at this point of the program: the compiler cannot see that a wgmma
// writes its accumulators asynchronously, so every read of them is fenced after the
// wait_group, and every write before the wgmma.fence.
template <int kCount>
__device__ __forceinline__ void fence_registers(float (&values)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(values[i])::"memory");
}
template <int kCount>
__device__ __forceinline__ void fence_registers(std::uint32_t (&values)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+r"(values[i])::"memory");
}

// acc (64×N fp32, the wgmma accumulator layout) (+)= A · B for one k-step of 16:
//   wgmma_ss: A (64×16, K-major) and B (N×16, K-major) in shared memory, by descriptor;
//   wgmma_rs: A from registers (4 × 16-bit pairs, the mma.m16n8k16 A fragment per warp), B
//             (16×N) in shared memory N-major, read transposed (imm-trans-b = 1).
// accumulate = 0 overwrites acc (scale-d false). Thread t of the warpgroup holds, for
// i < N/8: acc[4i + 2h + e] = row 16·(t / 32) + (t % 32) / 4 + 8h, column 8i + 2·(t % 4) + e.
template <class Element, int kN>
__device__ __forceinline__ void wgmma_ss(float (&acc)[kN / 2], std::uint64_t a_descriptor, std::uint64_t b_descriptor,
                                         int accumulate);
template <class Element, int kN>
__device__ __forceinline__ void wgmma_rs(float (&acc)[kN / 2], const std::uint32_t (&a)[4], std::uint64_t b_descriptor,
                                         int accumulate);
// wgmma_ss with both operands MN-major, read transposed (imm-trans-a = imm-trans-b = 1): A
// (64×16) stored as 16 rows along K of 64 M-contiguous elements, B (16×N) as 16 rows along K of N
// contiguous elements — the layout TMA writes for a [k][m] or [k][n] tile in 64-column slabs
// (the backward's dQ = dS·K reads dSᵀ [key][query] and K [key][column] so).
template <class Element, int kN>
__device__ __forceinline__ void wgmma_ss_transposed(float (&acc)[kN / 2], std::uint64_t a_descriptor,
                                                    std::uint64_t b_descriptor, int accumulate);

// clang-format off
// The asm operand lists: the accumulator registers are operands 0 .. N/2 - 1, inputs follow.
#define FLASH3_REGS10(tens)                                                                               \
  " %" #tens "0, %" #tens "1, %" #tens "2, %" #tens "3, %" #tens "4, %" #tens "5, %" #tens "6, %" #tens \
  "7, %" #tens "8, %" #tens "9"
#define FLASH3_ACC32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9," FLASH3_REGS10(1) "," FLASH3_REGS10(2) ", %30, %31}"
#define FLASH3_ACC40 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9," FLASH3_REGS10(1) "," FLASH3_REGS10(2) "," FLASH3_REGS10(3) "}"
#define FLASH3_ACC64                                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9," FLASH3_REGS10(1) "," FLASH3_REGS10(2) "," FLASH3_REGS10(3) "," \
      FLASH3_REGS10(4) "," FLASH3_REGS10(5) ", %60, %61, %62, %63}"
#define FLASH3_ACC88                                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9," FLASH3_REGS10(1) "," FLASH3_REGS10(2) "," FLASH3_REGS10(3) "," \
      FLASH3_REGS10(4) "," FLASH3_REGS10(5) "," FLASH3_REGS10(6) "," FLASH3_REGS10(7) ", %80, %81, %82, %83, %84, %85, " \
      "%86, %87}"
#define FLASH3_ACC128                                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9," FLASH3_REGS10(1) "," FLASH3_REGS10(2) "," FLASH3_REGS10(3) "," \
      FLASH3_REGS10(4) "," FLASH3_REGS10(5) "," FLASH3_REGS10(6) "," FLASH3_REGS10(7) "," FLASH3_REGS10(8) "," \
      FLASH3_REGS10(9) "," FLASH3_REGS10(10) "," FLASH3_REGS10(11) ", %120, %121, %122, %123, %124, %125, %126, %127}"
#define FLASH3_OUT4(i) "+f"(acc[i]), "+f"(acc[(i) + 1]), "+f"(acc[(i) + 2]), "+f"(acc[(i) + 3])
#define FLASH3_OUT16(i) FLASH3_OUT4(i), FLASH3_OUT4((i) + 4), FLASH3_OUT4((i) + 8), FLASH3_OUT4((i) + 12)
#define FLASH3_OUT32 FLASH3_OUT16(0), FLASH3_OUT16(16)
#define FLASH3_OUT40 FLASH3_OUT32, FLASH3_OUT4(32), FLASH3_OUT4(36)
#define FLASH3_OUT64 FLASH3_OUT32, FLASH3_OUT16(32), FLASH3_OUT16(48)
#define FLASH3_OUT88 FLASH3_OUT64, FLASH3_OUT16(64), FLASH3_OUT4(80), FLASH3_OUT4(84)
#define FLASH3_OUT128 FLASH3_OUT64, FLASH3_OUT16(64), FLASH3_OUT16(80), FLASH3_OUT16(96), FLASH3_OUT16(112)

// One wgmma, `INSTRUCTION d, a, b-desc, scale-d, IMMEDIATES` (ACC: d's registers, A: a's
// descriptor or registers, B_DESC and ACCUMULATE: operand numbers), scale-d the predicate
// ACCUMULATE != 0; the variadic arguments are the asm's operands, `outputs : inputs`.
#define FLASH3_WGMMA(INSTRUCTION, ACC, A, B_DESC, ACCUMULATE, IMMEDIATES, ...)                                     \
  asm volatile(                                                                                                    \
      "{\n"                                                                                                        \
      ".reg .pred accumulate;\n"                                                                                   \
      "setp.ne.b32 accumulate, " ACCUMULATE ", 0;\n"                                                               \
      INSTRUCTION " " ACC ", " A ", " B_DESC ", accumulate, " IMMEDIATES ";\n"                                     \
      "}\n"                                                                                                        \
      : __VA_ARGS__)

// SS: "d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-a, imm-trans-b".
// A_DESC, B_DESC, ACCUMULATE: the operand numbers N/2, N/2 + 1, N/2 + 2; FUNCTION and TRANSPOSE:
// wgmma_ss with "0, 0" (both K-major) or wgmma_ss_transposed with "1, 1".
#define FLASH3_DEFINE_WGMMA_SS_AS(FUNCTION, TRANSPOSE, ELEMENT, TYPE, N, ACC, OUTS, A_DESC, B_DESC, ACCUMULATE)    \
  template <>                                                                                                      \
  __device__ __forceinline__ void FUNCTION<ELEMENT, N>(float(&acc)[(N) / 2], std::uint64_t a_descriptor,           \
                                                       std::uint64_t b_descriptor, int accumulate) {               \
    FLASH3_WGMMA("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE, ACC, A_DESC, B_DESC, ACCUMULATE, \
                 "1, 1, " TRANSPOSE, OUTS : "l"(a_descriptor), "l"(b_descriptor), "r"(accumulate));                \
  }
// RS: "d, a, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b"; A_REGS are the operand
// numbers N/2 .. N/2 + 3, B_DESC N/2 + 4, ACCUMULATE N/2 + 5.
#define FLASH3_DEFINE_WGMMA_RS(ELEMENT, TYPE, N, ACC, OUTS, A_REGS, B_DESC, ACCUMULATE)                            \
  template <>                                                                                                      \
  __device__ __forceinline__ void wgmma_rs<ELEMENT, N>(float(&acc)[(N) / 2], const std::uint32_t(&a)[4],           \
                                                       std::uint64_t b_descriptor, int accumulate) {               \
    FLASH3_WGMMA("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE, ACC, A_REGS, B_DESC, ACCUMULATE, \
                 "1, 1, 1",                                                                                        \
                 OUTS : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_descriptor), "r"(accumulate));           \
  }

// The shapes the configurations use (traits.cuh): S = Q·Kᵀ with N = kTileN (64, 128, 176 for
// kernel config "n176" at d128 and 80 for "n80" at d256) and O += P·V with N = head dim (64, 128, 256).
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", __half, "f16", 64, FLASH3_ACC32, FLASH3_OUT32, "%32", "%33", "%34")
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", __nv_bfloat16, "bf16", 64, FLASH3_ACC32, FLASH3_OUT32, "%32", "%33", "%34")
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", __half, "f16", 128, FLASH3_ACC64, FLASH3_OUT64, "%64", "%65", "%66")
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", __nv_bfloat16, "bf16", 128, FLASH3_ACC64, FLASH3_OUT64, "%64", "%65", "%66")
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", __half, "f16", 176, FLASH3_ACC88, FLASH3_OUT88, "%88", "%89", "%90")
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", __nv_bfloat16, "bf16", 176, FLASH3_ACC88, FLASH3_OUT88, "%88", "%89", "%90")
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", __half, "f16", 80, FLASH3_ACC40, FLASH3_OUT40, "%40", "%41", "%42")
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", __nv_bfloat16, "bf16", 80, FLASH3_ACC40, FLASH3_OUT40, "%40", "%41", "%42")
FLASH3_DEFINE_WGMMA_RS(__half, "f16", 64, FLASH3_ACC32, FLASH3_OUT32, "{%32, %33, %34, %35}", "%36", "%37")
FLASH3_DEFINE_WGMMA_RS(__nv_bfloat16, "bf16", 64, FLASH3_ACC32, FLASH3_OUT32, "{%32, %33, %34, %35}", "%36", "%37")
FLASH3_DEFINE_WGMMA_RS(__half, "f16", 128, FLASH3_ACC64, FLASH3_OUT64, "{%64, %65, %66, %67}", "%68", "%69")
FLASH3_DEFINE_WGMMA_RS(__nv_bfloat16, "bf16", 128, FLASH3_ACC64, FLASH3_OUT64, "{%64, %65, %66, %67}", "%68", "%69")
FLASH3_DEFINE_WGMMA_RS(__half, "f16", 256, FLASH3_ACC128, FLASH3_OUT128, "{%128, %129, %130, %131}", "%132", "%133")
FLASH3_DEFINE_WGMMA_RS(__nv_bfloat16, "bf16", 256, FLASH3_ACC128, FLASH3_OUT128, "{%128, %129, %130, %131}", "%132",
                       "%133")

// The backward's dQ tile per consumer: 64 queries × 64 columns.
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss_transposed, "1, 1", __half, "f16", 64, FLASH3_ACC32, FLASH3_OUT32, "%32", "%33", "%34")
FLASH3_DEFINE_WGMMA_SS_AS(wgmma_ss_transposed, "1, 1", __nv_bfloat16, "bf16", 64, FLASH3_ACC32, FLASH3_OUT32, "%32", "%33", "%34")

#undef FLASH3_DEFINE_WGMMA_SS_AS
#undef FLASH3_DEFINE_WGMMA_RS
// FLASH3_WGMMA, FLASH3_ACC* and FLASH3_OUT* stay defined: fp8_primitives.cuh builds its e4m3
// wgmma from them.
// clang-format on

}  // namespace attnsuite::cuda::hopper
