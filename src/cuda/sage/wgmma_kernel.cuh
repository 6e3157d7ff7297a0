// sage's Hopper (sm_90a) attention kernel (device code only): flash3's structure
// (cuda/flash3/kernel.cuh, fp8_kernel.cuh) on the quantizers' outputs (quant.cu).
//
// One CTA per (128-row query tile, q head, batch), three warpgroups: the producer (setmaxnreg.dec;
// one thread issues every TMA copy: INT8 Q once, then per K/V tile the INT8 K tile and the V
// tile into a kStages-deep ring, "full" mbarriers with transaction bytes, "empty" ones the
// consumer warps arrive on) and two consumers of 64 rows each (setmaxnreg.inc). Per K/V tile:
//  - S = Q8·K8ᵀ: wgmma m64n128k32 s32.s8.s8, both operands from shared memory (K-major);
//  - dequantized in fp32: s = int · (q_scale · k_scale) in log2 units (the quantizer folded
//    softmax scale · log2 e into q_scale). q_scale is per accumulator row (sage2: one per row;
//    sage: one per 128-row CTA tile), k_scale per 8-key column group (sage2: 8-key blocks; sage:
//    32 / 64-key blocks). int → float by the exponent trick fused into one FFMA (below);
//  - masks (boundary tiles only) and the online softmax in exp2, as flash3;
//  - sage: P rounded to the 16-bit dtype, O += P·V with the RS wgmma, V read transposed from
//    flash3's slabs (MN-major descriptor) — flash3's P·V exactly;
//    sage2: P → e4m3 (P·448, static scale) in the A-fragment order of wgmma k32 (flash3-fp8's
//    π, which is the quantizer's v_key_position), O_tile = P8·Vᵀ8 with the e4m3 RS wgmma into a
//    fresh fp32 accumulator, then O = O·correction + O_tile in fp32 (two-level accumulation: the
//    FP8 wgmma's own accumulation spans one 128-key tile only). 1/448 and V's channel scales
//    are applied once, in the epilogue.
// Schedules (Traits::kPingPong): "wgmma" — the two consumers take turns at the tensor cores
// (named barriers), one GEMM section (P·V of tile n + Q·Kᵀ of tile n + 1) at a time, so that one
// consumer's softmax runs while the other's GEMMs execute (FlashAttention-3's ping-pong);
// "wgmma-serial" — the consumers run unsynchronized, each GEMM → softmax → GEMM (flash3 v1).
// Epilogue: O / row sum, LSE = (max + log2 sum)·ln 2 + smooth-K's shift of the row (the Q
// quantizer computed it), straight to global memory. Rows that see no key: O = 0,
// LSE = -inf; a NaN sum propagates (docs/kernels/sage.md, "Edge cases").
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/empty_tile.cuh"
#include "cuda/common/key_range.cuh"
#include "cuda/hopper/fp8_layout.hpp"
#include "cuda/hopper/pipeline.cuh"
#include "cuda/sage/params.hpp"
#include "cuda/sage/quant_rule.hpp"
#include "cuda/sage/wgmma_primitives.cuh"
#include "cuda/sage/wgmma_traits.cuh"

namespace attnsuite::cuda::sage::wgmma {

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sage_wgmma_forward_kernel(const __grid_constant__ Params params, const __grid_constant__ CUtensorMap q_map,
                              const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  constexpr bool kFp8PV = Traits::kMode == Mode::Sage2;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kTileM = Traits::kTileM, kTileN = Traits::kTileN;
  constexpr int kStages = Traits::kStages;

  // Heavy (late, causal) row tiles first, so the short ones fill the tail of the grid.
  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int kv_head = head / params.group_size;
  const int row_begin = m_block * kTileM;
  const int row_last = min(row_begin + kTileM, params.seq_q) - 1;
  auto* o_head = static_cast<Element*>(params.o) + batch * params.o_batch_stride + head * params.o_head_stride;
  float* lse_head = params.lse != nullptr
                        ? params.lse + (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.seq_q
                        : nullptr;

  const KeyRange first_row_keys = key_range(params, row_begin);
  const KeyRange last_row_keys = key_range(params, row_last);
  const int n_block_min = first_row_keys.begin / kTileN;
  const int n_block_max = (last_row_keys.end + kTileN - 1) / kTileN;
  // The key tiles this CTA visits: tile i is n_block_min + i, or (block-sparse, `sparge-sage`)
  // the i-th kept one (Params::block_index); the same broadcast list read as flash3's.
  const int* kept = nullptr;
  int tiles = n_block_max - n_block_min;
  if (params.block_index != nullptr) {
    const std::int64_t slot = (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.m_blocks + m_block;
    kept = params.block_index + slot * params.n_blocks;
    tiles = params.block_count[slot];
  }
  const auto tile_block = [&](int t) { return kept != nullptr ? __ldg(kept + t) : n_block_min + t; };

  if (tiles <= 0 || n_block_max <= n_block_min || last_row_keys.end <= first_row_keys.begin) {
    // No row of the tile sees a key: O = 0, LSE = -inf, before any barrier exists.
    write_empty_tile<kTileM, kHeadDim, Traits::kThreads>(static_cast<int>(threadIdx.x), params, o_head, lse_head,
                                                         row_begin);
    return;
  }

  extern __shared__ __align__(1024) unsigned char shared_bytes[];
  const std::uint32_t smem = (shared_address(shared_bytes) + 1023u) & ~1023u;
  const std::uint32_t smem_q = smem + Traits::kQOffset;
  const std::uint32_t smem_k = smem + Traits::kKOffset;
  const std::uint32_t smem_v = smem + Traits::kVOffset;
  const std::uint32_t q_full = smem + Traits::kBarrierOffset;
  const BarrierRing<kStages> k_full{q_full, 1}, v_full{q_full, 1 + kStages}, kv_empty{q_full, 1 + 2 * kStages};

  if (threadIdx.x == 0) {
    barrier_init(q_full, 1);
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(k_full[stage], 1);
      barrier_init(v_full[stage], 1);
      barrier_init(kv_empty[stage], Traits::kConsumerWarps);
    }
    barrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (warpgroup == 0) {
    // ---- Producer ----
    release_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      barrier_arrive_expect_bytes(q_full, Traits::kQBytes);
      tma_load_4d(smem_q, &q_map, 0, row_begin, head, batch, q_full);
      int stage = 0;
      std::uint32_t phase = 0;
      for (int visit = 0; visit < tiles; ++visit) {
        const int n_block = tile_block(visit);
        barrier_wait(kv_empty[stage], phase ^ 1u);
        const int key_begin = n_block * kTileN;
        barrier_arrive_expect_bytes(k_full[stage], Traits::kKBytes);
        tma_load_4d(smem_k + stage * Traits::kKBytes, &k_map, 0, key_begin, kv_head, batch, k_full[stage]);
        const std::uint32_t v_tile = smem_v + stage * Traits::kVBytes;
        barrier_arrive_expect_bytes(v_full[stage], Traits::kVBytes);
        if constexpr (kFp8PV) {
          // Vᵀ8: coordinates (key, channel, kv head, batch); one box of 128 keys × head_dim rows.
          tma_load_4d(v_tile, &v_map, key_begin, 0, kv_head, batch, v_full[stage]);
        } else {
#pragma unroll
          for (int slab = 0; slab < Traits::kVSlabs; ++slab)
            tma_load_4d(v_tile + slab * Traits::kVSlabBytes, &v_map, 64 * slab, key_begin, kv_head, batch,
                        v_full[stage]);
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }

  // ---- Consumers ----
  claim_registers<Traits::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int warpgroup_thread = static_cast<int>(threadIdx.x) % 128;
  const int lane = warpgroup_thread % 32;
  const int quad_row = lane / 4, quad_col = lane % 4;
  const int thread_row = row_begin + consumer * Traits::kRowsPerConsumer + 16 * (warpgroup_thread / 32) + quad_row;

  const int unmasked_key_begin = last_row_keys.begin;
  const int unmasked_key_end = first_row_keys.end;

  // This thread's two Q scales (rows thread_row, thread_row + 8); 0 past the end of Q.
  const float* q_scale_head =
      params.q_scale + (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.q_blocks;
  const float* k_scale_head =
      params.k_scale + (static_cast<std::int64_t>(batch) * params.heads_kv + kv_head) * params.k_blocks;
  float q_scale[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int block = (thread_row + 8 * half) / Traits::kQBlockRows;
    q_scale[half] = block < params.q_blocks ? __ldg(q_scale_head + block) : 0.0f;
  }

  float acc_o[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_o[i] = 0.0f;
  // S: written by each tile's first Q·Kᵀ k-step (wgmma_ss_s8_first); the softmax turns it into
  // the float bits of the scores, then of P, in place.
  std::uint32_t acc_s[kTileN / 2];
  // sage2: each tile's FP8 P·V (overwritten by scale-d 0, so initialized once).
  float acc_tile[kFp8PV ? kHeadDim / 2 : 1];
#pragma unroll
  for (int i = 0; i < (kFp8PV ? kHeadDim / 2 : 1); ++i) acc_tile[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  // sage2 computes p·448 (the e4m3 value of P, P <= 1 after the max subtraction: a static
  // scale) as 2^(s − max + log2 448) rather than multiplying every p; its row sums are then
  // 448× too, which the epilogue takes out (O: 1/448 cancels; LSE: − log2 448).
  constexpr float kPExponentOffset = kFp8PV ? 8.8073549220576041f : 0.0f;  // log2(448)

  const std::uint64_t q_descriptor = matrix_descriptor_swizzled<Traits::kSwizzleBytes>(
      smem_q + consumer * Traits::kRowsPerConsumer * Traits::kRowBytes, 16, Traits::kSwizzlePeriod);

  // Ping-pong (Traits::kPingPong): the two consumers take turns at the tensor cores, so that one
  // runs its softmax while the other's GEMMs execute. A turn is one "GEMM section": serial and
  // ping-pong, P·V of tile n and the issue of Q·Kᵀ of tile n + 1; overlap, Q·Kᵀ of tile n + 1 and
  // P·V of tile n issued together; the first tile's Q·Kᵀ and the last tile's P·V are sections of
  // their own, so every consumer has T + 1 sections. Named barrier 1 + c is consumer c's turn:
  // it waits there (bar.sync, 256 = its 128 threads + the other consumer's 128 arriving) and,
  // after its section, arrives on the other's (bar.arrive). Consumer 1 arrives once on consumer
  // 0's barrier first, so consumer 0 starts; both have the same number of sections (the same
  // tiles), so consumer 1 skips its arrival after its last one and every bar.sync has exactly
  // one matching bar.arrive. (Barrier 0 is __syncthreads.)
  auto take_turn = [&] {
    if constexpr (Traits::kPingPong) named_barrier_sync(1 + consumer, 256);
  };
  auto pass_turn = [&](bool last_section) {
    if constexpr (Traits::kPingPong) {
      if (!(last_section && consumer == 1)) named_barrier_arrive(2 - consumer, 256);
    }
  };
  if constexpr (Traits::kPingPong) {
    if (consumer == 1) named_barrier_arrive(1, 256);
  }

  // Issues S = Q8·K8ᵀ of the tile in `stage` (committed, not waited for; the caller has waited
  // for K): head_dim / 32 k-steps of 32 bytes inside the swizzled row (+2 in the encoded start
  // address; the hardware applies the swizzle to the computed addresses).
  auto issue_scores = [&](int stage) {
    const std::uint64_t k_descriptor =
        matrix_descriptor_swizzled<Traits::kSwizzleBytes>(smem_k + stage * Traits::kKBytes, 16, Traits::kSwizzlePeriod);
    wgmma_ss_s8_first(acc_s, q_descriptor, k_descriptor);
#pragma unroll
    for (int k_step = 1; k_step < kHeadDim / 32; ++k_step)
      wgmma_ss_s8<kTileN>(acc_s, q_descriptor + 2 * k_step, k_descriptor + 2 * k_step, 1);
    wgmma_commit();
  };

  // The tile's P as wgmma A fragments: sage, 16-bit pairs (16 keys per k-step); sage2, e4m3 in
  // the A-fragment order of k32 (a[0] = row g keys 2c, 2c+1, 2c+8, 2c+9 of the first 16, a[1]
  // the same of row g+8, a[2] / a[3] the next 16 keys), which is the order Vᵀ8 holds its keys in
  // (v_key_position = π⁻¹, fp8_layout.hpp).
  constexpr int kPSteps = kFp8PV ? kTileN / 32 : kTileN / 16;
  std::uint32_t p[kPSteps][4];
  // The online softmax of the tile in acc_s (INT8 dot products): leaves P in acc_s (float bits;
  // sage2: P·448) and the rows' correction. With x the int score and c = q_scale·k_scale,
  // bits(x + 0x4B400000) is the float 1.5·2^23 + x exactly (|x| < 2^22), so fma(that, c,
  // −1.5·2^23·c) = x·c up to the rounding of 1.5·2^23·c, at most 0.75·c — under one unit of the
  // INT8 dot product, whose quantization error is hundreds of units. c = 0 gives 0; a NaN / inf
  // scale gives NaN scores and so a NaN row sum.
  //  - sage2 (v6), tiles inside every row's key range: a thread's 32 keys of the tile are one K
  //    group (quant_rule.hpp), so c is one factor per row half and c ≥ 0: the row's maximum of
  //    x·c is (max x)·c, taken on the ints (a tree of IMNMX), converted once; and exp2 takes
  //    fma(bits(x + magic), c, −1.5·2^23·c − max) directly — per score IMNMX, IADD, FFMA, MUFU
  //    (v5: IADD, FFMA, FMNMX, FADD, MUFU, and 16 scale factors per tile instead of 1);
  //  - otherwise (sage, and boundary tiles of sage2) dequantize in place, mask, float maximum.
  //  Maximum and sum are balanced trees (tree_reduce; v5: the serial chains cost sage2 7–9%).
  auto softmax_tile = [&](int n_block, const float(&k_scale)[Traits::kKScales], float(&correction)[2]) {
    const int key_begin = n_block * kTileN;
    const bool masked = key_begin < unmasked_key_begin || key_begin + kTileN > unmasked_key_end;
    bool fused = false;
    if constexpr (Traits::kKScales == 1) fused = !masked;
    float c[2], offset[2], tile_max[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      c[half] = q_scale[half] * k_scale[0];
      offset[half] = -12582912.0f * c[half];
    }
    const auto magic = [](std::uint32_t x) { return __uint_as_float(x + static_cast<std::uint32_t>(kMagicFloatBits)); };
    if (fused) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int partial[kTileN / 8];
#pragma unroll
        for (int i = 0; i < kTileN / 8; ++i)
          partial[i] = max(static_cast<int>(acc_s[4 * i + 2 * half]), static_cast<int>(acc_s[4 * i + 2 * half + 1]));
        tile_max[half] = static_cast<float>(tree_reduce(partial, [](int a, int b) { return max(a, b); })) * c[half];
      }
    } else {
#pragma unroll
      for (int i = 0; i < kTileN / 8; ++i) {
        const float k_scale_i = k_scale[8 * i / (kTileN / Traits::kKScales)];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float ci = q_scale[half] * k_scale_i;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int entry = 4 * i + 2 * half + e;
            acc_s[entry] = __float_as_uint(fmaf(magic(acc_s[entry]), ci, -12582912.0f * ci));
          }
        }
      }
      if (masked) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const KeyRange keys = key_range(params, thread_row + 8 * half);
#pragma unroll
          for (int i = 0; i < kTileN / 8; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = key_begin + 8 * i + 2 * quad_col + e;
              if (key < keys.begin || key >= keys.end) acc_s[4 * i + 2 * half + e] = __float_as_uint(-INFINITY);
            }
        }
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float partial[kTileN / 8];
#pragma unroll
        for (int i = 0; i < kTileN / 8; ++i)
          partial[i] = fmaxf(__uint_as_float(acc_s[4 * i + 2 * half]), __uint_as_float(acc_s[4 * i + 2 * half + 1]));
        tile_max[half] = tree_reduce(partial, [](float a, float b) { return fmaxf(a, b); });
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float new_max = fmaxf(row_max[half], quad_max(tile_max[half]));
      // A row that has seen no key keeps max -inf; subtracting 0 keeps its p at 0, not NaN.
      const float max_used = new_max == -INFINITY ? 0.0f : new_max;
      correction[half] = exp2_approx(row_max[half] - max_used);
      row_max[half] = new_max;
      const float p_offset = max_used - kPExponentOffset;
      const float fused_offset = offset[half] - p_offset;
      float partial[kTileN / 8];
      // Two loops that differ only in the exponent's argument, kept apart: folded into one body
      // (a generic lambda per argument) the sage2 kernels' SASS grew by 1–1.6% (CUDA 13.0,
      // 2026-12-04), a change no GPU run has measured; sage's was identical.
      if (fused) {
#pragma unroll
        for (int i = 0; i < kTileN / 8; ++i) {
          float prob[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            prob[e] =
                softmax_exp2<Traits::kFmaExp2Every>(i, fmaf(magic(acc_s[4 * i + 2 * half + e]), c[half], fused_offset));
            acc_s[4 * i + 2 * half + e] = __float_as_uint(prob[e]);
          }
          partial[i] = prob[0] + prob[1];
        }
      } else {
#pragma unroll
        for (int i = 0; i < kTileN / 8; ++i) {
          float prob[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            prob[e] = softmax_exp2<Traits::kFmaExp2Every>(i, __uint_as_float(acc_s[4 * i + 2 * half + e]) - p_offset);
            acc_s[4 * i + 2 * half + e] = __float_as_uint(prob[e]);
          }
          partial[i] = prob[0] + prob[1];
        }
      }
      const float sum = tree_reduce(partial, [](float a, float b) { return a + b; });
      row_sum[half] = row_sum[half] * correction[half] + sum;
    }
  };
  auto convert_p = [&] {
    if constexpr (!kFp8PV) {
#pragma unroll
      for (int j = 0; j < kTileN / 16; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          p[j][r] =
              pack_pair<Element>(__uint_as_float(acc_s[8 * j + 2 * r]), __uint_as_float(acc_s[8 * j + 2 * r + 1]));
    } else {
#pragma unroll
      for (int j = 0; j < kTileN / 32; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          using hopper::fp8_layout::p_entry;
          const std::uint32_t* tile = acc_s + 16 * j;
          p[j][r] = pack_e4m3x4(__uint_as_float(tile[p_entry(r, 0)]), __uint_as_float(tile[p_entry(r, 1)]),
                                __uint_as_float(tile[p_entry(r, 2)]), __uint_as_float(tile[p_entry(r, 3)]));
        }
    }
  };
  auto fence_p = [&] {
#pragma unroll
    for (int j = 0; j < kPSteps; ++j) fence_registers(p[j]);
  };
  // Issues P·V of the tile in `stage` (committed, not waited for; the caller has waited for V):
  // sage, flash3's P·V into O (RS wgmma, V read transposed from 64-column slabs); sage2, the
  // tile's FP8 product into a fresh fp32 accumulator (scale-d 0 on the first k-step).
  auto issue_pv = [&](int stage) {
    const std::uint32_t v_tile = smem_v + stage * Traits::kVBytes;
    if constexpr (!kFp8PV) {
      const std::uint64_t v_descriptor = matrix_descriptor(v_tile, Traits::kVSlabBytes, 1024);
#pragma unroll
      for (int j = 0; j < kTileN / 16; ++j)
        wgmma_rs<Element, kHeadDim>(acc_o, p[j], v_descriptor + j * 16 * 128 / 16, 1);
    } else {
      const std::uint64_t vt_descriptor = matrix_descriptor_swizzled<128>(v_tile, 16, 1024);
#pragma unroll
      for (int j = 0; j < kTileN / 32; ++j)
        wgmma_rs_e4m3<kHeadDim>(acc_tile, p[j], vt_descriptor + 2 * j, j > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  auto fence_pv = [&] {
    if constexpr (!kFp8PV) {
      fence_registers(acc_o);
    } else {
      fence_registers(acc_tile);
    }
  };
  // sage: O (its previous P·V completed) rescaled in registers before the next P·V adds to it.
  auto rescale_o = [&](const float(&correction)[2]) {
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * i + e] *= correction[e / 2];
  };
  // sage2, two-level accumulation: O = O·correction + O_tile in fp32 (one FFMA, where flash3 has
  // the FMUL of its rescale).
  auto accumulate_tile = [&](const float(&correction)[2]) {
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * i + e] = fmaf(acc_o[4 * i + e], correction[e / 2], acc_tile[4 * i + e]);
  };
  // This thread's K scales of tile n_block (k_scale_index of its columns: sage, the tile's
  // blocks; sage2, its one key group), read (L1-resident) before the waits for the tile. Scales
  // past the end of K are 0: those keys are masked.
  auto load_k_scales = [&](int n_block, float(&k_scale)[Traits::kKScales]) {
    // A tile's scales are consecutive: sage's blocks from n_block · kTileN / kKBlockRows (written
    // so, not through k_scale_index of each thread's key: that form cost sage 1.8% on the H200,
    // 2026-12-04 A/B, for address arithmetic the compiler did not fold), sage2's one group.
    const int first = k_key_groups(Traits::kMode)
                          ? k_scale_index(Traits::kMode, kHeadDim, n_block * kTileN + 2 * quad_col)
                          : n_block * (kTileN / Traits::kKBlockRows);
#pragma unroll
    for (int b = 0; b < Traits::kKScales; ++b) {
      const int block = first + b;
      k_scale[b] = block < params.k_blocks ? __ldg(k_scale_head + block) : 0.0f;
    }
  };
  auto next_stage = [&](int& stage, std::uint32_t& phase) {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  };

  barrier_wait(q_full, 0);

  int stage = 0;
  std::uint32_t phase = 0;
  if constexpr (!Traits::kOverlap) {
    // Serial and ping-pong: per tile S, wait, softmax, P·V, wait.
    for (int visit = 0; visit < tiles; ++visit) {
      const int n_block = tile_block(visit);
      float k_scale[Traits::kKScales];
      load_k_scales(n_block, k_scale);
      barrier_wait(k_full[stage], phase);
      // Q·Kᵀ of this tile ends the section that P·V of the previous tile began (the first
      // tile's is a section of its own).
      if (visit == 0) take_turn();
      wgmma_fence();
      issue_scores(stage);
      pass_turn(false);
      wgmma_wait<0>();
      fence_registers(acc_s);
      float correction[2];
      softmax_tile(n_block, k_scale, correction);
      if constexpr (!kFp8PV) rescale_o(correction);
      convert_p();
      take_turn();
      barrier_wait(v_full[stage], phase);
      fence_pv();
      fence_p();
      wgmma_fence();
      issue_pv(stage);
      wgmma_wait<0>();
      fence_pv();
      if constexpr (kFp8PV) accumulate_tile(correction);
      // This warp is done with the stage (its wgmma reads of K and V have completed).
      if (lane == 0) barrier_arrive(kv_empty[stage]);
      next_stage(stage, phase);
      // The section goes on with the next tile's Q·Kᵀ (top of the loop); after the last tile's
      // P·V it ends here.
      if (visit + 1 == tiles) pass_turn(true);
    }
  } else {
    // Overlap (flash3 v2's schedule): for tile j, Q·K_jᵀ and P_{j-1}·V_{j-1} are issued in one
    // section (two commit groups); wait_group 1 returns when S_j is in, so the softmax of tile j
    // runs while the tensor cores still do P_{j-1}·V_{j-1}; then wait_group 0 and, sage,
    // O *= correction_j (P_j·V_j adds to it next), sage2, O = O·correction_{j-1} + O_tile_{j-1}
    // (the tile product is relative to its own tile's max). A stage (K and V together: one
    // empty barrier) is released when its P·V has completed, one tile later than the serial
    // schedule: the ring has 3–4 stages. It costs one more tile of live registers: P_{j-1}
    // (an operand of the running wgmma) beside S_j.
    float pending[2] = {0.0f, 0.0f};  // sage2: the correction of the tile whose P·V is in flight
    float k_scale[Traits::kKScales];
    load_k_scales(tile_block(0), k_scale);
    barrier_wait(k_full[stage], phase);
    take_turn();
    wgmma_fence();
    issue_scores(stage);
    pass_turn(false);
    wgmma_wait<0>();
    fence_registers(acc_s);
    softmax_tile(tile_block(0), k_scale, pending);  // O is 0: nothing to rescale
    convert_p();
    for (int visit = 1; visit < tiles; ++visit) {
      const int n_block = tile_block(visit);
      const int previous_stage = stage;
      const std::uint32_t previous_phase = phase;
      next_stage(stage, phase);
      load_k_scales(n_block, k_scale);
      barrier_wait(k_full[stage], phase);
      barrier_wait(v_full[previous_stage], previous_phase);
      take_turn();
      fence_pv();
      fence_p();
      wgmma_fence();
      issue_scores(stage);
      issue_pv(previous_stage);
      pass_turn(false);
      wgmma_wait<1>();  // S_j is in; P_{j-1}·V_{j-1} may still run
      fence_registers(acc_s);
      float correction[2];
      softmax_tile(n_block, k_scale, correction);
      wgmma_wait<0>();
      fence_pv();
      fence_p();
      // This warp is done with the previous stage (its reads of K_{j-1} and V_{j-1}).
      if (lane == 0) barrier_arrive(kv_empty[previous_stage]);
      if constexpr (!kFp8PV) {
        rescale_o(correction);
      } else {
        accumulate_tile(pending);
        pending[0] = correction[0];
        pending[1] = correction[1];
      }
      convert_p();
    }
    // The last tile's P·V.
    barrier_wait(v_full[stage], phase);
    take_turn();
    fence_pv();
    fence_p();
    wgmma_fence();
    issue_pv(stage);
    pass_turn(true);
    wgmma_wait<0>();
    fence_pv();
    if (lane == 0) barrier_arrive(kv_empty[stage]);
    if constexpr (kFp8PV) accumulate_tile(pending);
  }

  // Epilogue: O / row sum (sage2: · v_scale[channel]; its sums are of P·448, which cancels the
  // 1/448 of P8); LSE = (max + log2 sum)·ln 2 (sage2: log2(sum / 448)).
  // sum == 0 only where the row saw no key: O = 0 even where V holds NaN/Inf (P·V gave 0·NaN
  // there), LSE = -inf. A NaN sum (NaN or +Inf among the row's scores) propagates to O and LSE.
  float channel_scale[kHeadDim / 4];
#pragma unroll
  for (int i = 0; i < kHeadDim / 8; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if constexpr (kFp8PV) {
        const float* v_scale_head =
            params.v_scale + (static_cast<std::int64_t>(batch) * params.heads_kv + kv_head) * kHeadDim;
        channel_scale[2 * i + e] = __ldg(v_scale_head + 8 * i + 2 * quad_col + e);
      } else {
        channel_scale[2 * i + e] = 1.0f;
      }
    }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = quad_sum(row_sum[half]);
    const bool seen = sum != 0.0f;
    const float inverse = 1.0f / sum;
    const int row = thread_row + 8 * half;
    if (row < params.seq_q) {
      if (lse_head != nullptr && quad_col == 0) {
        // + smooth-K's shift of the row's scores (QuantParams::lse_shift).
        lse_head[row] =
            seen ? (row_max[half] + (log2f(sum) - kPExponentOffset)) * 0.69314718055994531f +
                       params.lse_shift[(static_cast<std::int64_t>(batch) * params.heads_q + head) * params.seq_q + row]
                 : -INFINITY;
      }
      Element* o_row = o_head + row * params.o_row_stride + 2 * quad_col;
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i) {
        const float low = seen ? acc_o[4 * i + 2 * half] * (inverse * channel_scale[2 * i]) : 0.0f;
        const float high = seen ? acc_o[4 * i + 2 * half + 1] * (inverse * channel_scale[2 * i + 1]) : 0.0f;
        *reinterpret_cast<std::uint32_t*>(o_row + 8 * i) = pack_pair<Element>(low, high);
      }
    }
  }
#else
  (void)params;
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace attnsuite::cuda::sage::wgmma
