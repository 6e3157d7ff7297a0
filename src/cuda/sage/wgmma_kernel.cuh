// sage's Hopper (sm_90a) attention kernel (device code only): flash3's structure (policies over
// the Hopper layer, cuda/hopper/) on the quantizers' outputs (quant.cu). One CTA per 128-row
// query tile: a producer warpgroup (TMA: INT8 Q, INT8 K and V tiles) and two consumers of 64
// rows each. Per K/V tile:
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
// Schedules (hopper/mainloop.cuh): "wgmma" overlapped with ping-pong; "wgmma-pingpong" serial
// with ping-pong; "wgmma-serial" serial, the consumers unsynchronized (flash3 v1).
// Epilogue: O / row sum, LSE = (max + log2 sum)·ln 2 + smooth-K's shift of the row (the Q
// quantizer computed it); rows that see no key: O = 0, LSE = -inf; a NaN sum propagates
// (docs/kernels/sage.md, "Edge cases").
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/hopper/consumer.cuh"
#include "cuda/hopper/forward.cuh"
#include "cuda/hopper/scheduler.cuh"
#include "cuda/sage/params.hpp"
#include "cuda/sage/quant_rule.hpp"
#include "cuda/sage/wgmma_primitives.cuh"
#include "cuda/sage/wgmma_traits.cuh"

namespace attnsuite::cuda::sage::wgmma {

template <class Traits>
using Tile = WorkTile<Traits::kTileM, Traits::kTileN, true>;

// The mbarriers: Q full, K full, V full, K/V empty ×stages (a stage is released as a whole,
// after its P·V).
template <class Traits>
struct Barriers : BarrierSet<Traits::kStages, 3> {
  using BarrierSet<Traits::kStages, 3>::BarrierSet;
  BarrierRing<Traits::kStages> k_full = this->ring(0), v_full = this->ring(1), kv_empty = this->ring(2);
  __device__ __forceinline__ void init() const {
    BarrierSet<Traits::kStages, 3>::init({1, 1, Traits::kConsumerWarps}, 0);
  }
};

template <class Traits>
using ConsumerOf = ConsumerBase<Traits, Params, Tile<Traits>, Traits::kMode == Mode::Sage2 ? 32 : 16, std::uint32_t>;

// A consumer thread's work. S (acc_s) holds the INT8 products, written by each tile's first Q·Kᵀ
// k-step (wgmma_ss_s8_first: never read before, so not live across the softmax and P·V); the
// softmax turns it into the float bits of the scores, then of P, in place.
template <class Traits>
struct Consumer : ConsumerOf<Traits> {
  static constexpr bool kFp8PV = Traits::kMode == Mode::Sage2;
  static constexpr int kHeadDim = Traits::kHeadDim, kTileN = Traits::kTileN;
  // sage2 computes p·448 (the e4m3 value of P, P <= 1 after the max subtraction: a static
  // scale) as 2^(s − max + log2 448) rather than multiplying every p; its row sums are then
  // 448× too, which the epilogue takes out (O: 1/448 cancels; LSE: − log2 448).
  static constexpr float kPExponentOffset = kFp8PV ? 8.8073549220576041f : 0.0f;  // log2(448)
  using Base = ConsumerOf<Traits>;
  using Base::acc_o, Base::acc_s, Base::row_max, Base::row_sum, Base::quad_col, Base::thread_row;
  using Base::params, Base::tile, Base::smem;
  std::uint64_t q_descriptor;
  const float* k_scale_head;
  float q_scale[2];                 // this thread's two rows' Q scales; 0 past the end of Q
  float k_scale[Traits::kKScales];  // the current tile's K scales of this thread's columns
  // sage2: each tile's FP8 P·V (overwritten by scale-d 0, so initialized once), and the
  // correction of the tile whose P·V is in flight (overlapped schedule).
  float acc_tile[kFp8PV ? kHeadDim / 2 : 1];
  float pending[2] = {0.0f, 0.0f};
  float channel_scale[kHeadDim / 4];  // the epilogue's V channel scales (sage2; sage: 1)

  template <class Kernel>
  __device__ __forceinline__ Consumer(const Kernel& kernel, const Tile<Traits>& tile_, int consumer,
                                      const Barriers<Traits>& bar, std::uint32_t smem_)
      : Base(kernel.params, tile_, consumer, smem_, bar.k_full, bar.v_full, bar.kv_empty, bar.kv_empty),
        q_descriptor(matrix_descriptor_swizzled<Traits::kSwizzleBytes>(
            smem_ + Traits::kQOffset + consumer * Traits::kRowsPerConsumer * Traits::kRowBytes, 16,
            Traits::kSwizzlePeriod)),
        k_scale_head(kernel.params.k_scale +
                     (static_cast<std::int64_t>(tile_.batch) * kernel.params.heads_kv + tile_.kv_head) *
                         kernel.params.k_blocks) {
    const float* q_scale_head =
        params.q_scale + (static_cast<std::int64_t>(tile.batch) * params.heads_q + tile.head) * params.q_blocks;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int block = (thread_row + 8 * half) / Traits::kQBlockRows;
      q_scale[half] = block < params.q_blocks ? __ldg(q_scale_head + block) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < (kFp8PV ? kHeadDim / 2 : 1); ++i) acc_tile[i] = 0.0f;
  }

  // This thread's K scales of tile n_block (k_scale_index of its columns: sage, the tile's
  // blocks; sage2, its one key group), read (L1-resident) before the waits for the tile. Scales
  // past the end of K are 0: those keys are masked. A tile's scales are consecutive: sage's blocks
  // from n_block · kTileN / kKBlockRows (written so, not through k_scale_index of each thread's
  // key: that form cost sage 1.8% on the H200, 2026-12-04 A/B, for address arithmetic the
  // compiler did not fold), sage2's one group.
  __device__ __forceinline__ void prepare(int n_block) {
    const int first = k_key_groups(Traits::kMode)
                          ? k_scale_index(Traits::kMode, kHeadDim, n_block * kTileN + 2 * quad_col)
                          : n_block * (kTileN / Traits::kKBlockRows);
#pragma unroll
    for (int b = 0; b < Traits::kKScales; ++b) {
      const int block = first + b;
      k_scale[b] = block < params.k_blocks ? __ldg(k_scale_head + block) : 0.0f;
    }
  }

  // S = Q8·K8ᵀ of the tile in `stage`: head_dim / 32 k-steps of 32 bytes inside the swizzled row
  // (+2 in the encoded start address; the hardware applies the swizzle to the computed addresses).
  __device__ __forceinline__ void fence_qk() {}
  __device__ __forceinline__ void issue_qk(int stage) {
    const std::uint64_t k_descriptor = matrix_descriptor_swizzled<Traits::kSwizzleBytes>(
        smem + Traits::kKOffset + stage * Traits::kKBytes, 16, Traits::kSwizzlePeriod);
    wgmma_ss_s8_first(acc_s, q_descriptor, k_descriptor);
#pragma unroll
    for (int k_step = 1; k_step < kHeadDim / 32; ++k_step)
      wgmma_ss_s8<kTileN>(acc_s, q_descriptor + 2 * k_step, k_descriptor + 2 * k_step, 1);
    wgmma_commit();
  }

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
  __device__ __forceinline__ void softmax(int n_block, float (&correction)[2]) {
    const bool masked = tile.masked(n_block);
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
      if (masked) this->mask(n_block);
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
            prob[e] = exp2_approx(fmaf(magic(acc_s[4 * i + 2 * half + e]), c[half], fused_offset));
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
            prob[e] = exp2_approx(__uint_as_float(acc_s[4 * i + 2 * half + e]) - p_offset);
            acc_s[4 * i + 2 * half + e] = __float_as_uint(prob[e]);
          }
          partial[i] = prob[0] + prob[1];
        }
      }
      const float sum = tree_reduce(partial, [](float a, float b) { return a + b; });
      row_sum[half] = row_sum[half] * correction[half] + sum;
    }
  }

  // P·V of the tile in `stage`: sage, flash3's P·V into O; sage2, the tile's FP8 product into a
  // fresh fp32 accumulator.
  __device__ __forceinline__ void issue_pv(int stage) {
    if constexpr (!kFp8PV) {
      this->multiply_pv(acc_o, smem + Traits::kVOffset + stage * Traits::kVBytes, Traits::kVSlabBytes);
    } else {
      this->multiply_pv(acc_tile, smem + Traits::kVOffset + stage * Traits::kVBytes, 0, true);
    }
  }
  __device__ __forceinline__ void fence_pv() {
    if constexpr (!kFp8PV) {
      fence_registers(acc_o);
    } else {
      fence_registers(acc_tile);
    }
  }

  // O's correction: sage, flash3's (O rescaled before the next P·V adds to it); sage2, two-level
  // accumulation: O = O·correction + O_tile in fp32 once the tile's P·V has completed (one FFMA,
  // where flash3 has the FMUL of its rescale; the tile product is relative to its own tile's
  // max, so the overlapped schedule applies the correction of the tile whose P·V it adds).
  __device__ __forceinline__ void accumulate_tile(const float (&correction)[2]) {
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * i + e] = fmaf(acc_o[4 * i + e], correction[e / 2], acc_tile[4 * i + e]);
  }
  __device__ __forceinline__ void rescale_o(const float (&correction)[2]) {
    if constexpr (!kFp8PV) Base::rescale_o(correction);
  }
  __device__ __forceinline__ void accumulate(const float (&correction)[2]) {
    if constexpr (kFp8PV) accumulate_tile(correction);
  }
  __device__ __forceinline__ void begin_o(const float (&correction)[2]) {
    pending[0] = correction[0];
    pending[1] = correction[1];
  }
  __device__ __forceinline__ void update_o(const float (&correction)[2]) {
    if constexpr (!kFp8PV) {
      Base::rescale_o(correction);
    } else {
      accumulate_tile(pending);
      begin_o(correction);
    }
  }
  __device__ __forceinline__ void finish_o() {
    if constexpr (kFp8PV) accumulate_tile(pending);
  }

  // K and V of a stage are released together, once its P·V has completed.
  __device__ __forceinline__ void release_k(const PipelineState<Traits::kStages>&, bool) {}
  __device__ __forceinline__ void release_stage(const PipelineState<Traits::kStages>& kv) { this->release_v(kv); }

  // Epilogue: O / row sum (sage2: · v_scale[channel]; its sums are of P·448, which cancels the
  // 1/448 of P8); LSE = (max + log2 sum)·ln 2 (sage2: log2(sum / 448)) + smooth-K's shift of the
  // row's scores (QuantParams::lse_shift).
  __device__ __forceinline__ void begin_epilogue() {
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if constexpr (kFp8PV) {
          const float* v_scale_head =
              params.v_scale + (static_cast<std::int64_t>(tile.batch) * params.heads_kv + tile.kv_head) * kHeadDim;
          channel_scale[2 * i + e] = __ldg(v_scale_head + 8 * i + 2 * quad_col + e);
        } else {
          channel_scale[2 * i + e] = 1.0f;
        }
      }
  }
  __device__ __forceinline__ float o_scale(float inverse, int i, int e) const {
    return inverse * channel_scale[2 * i + e];
  }
  __device__ __forceinline__ float lse(int half, int row, float sum) const {
    return (row_max[half] + (log2f(sum) - kPExponentOffset)) * 0.69314718055994531f +
           params.lse_shift[(static_cast<std::int64_t>(tile.batch) * params.heads_q + tile.head) * params.seq_q + row];
  }
};

// sage's wgmma kernel as policies over the Hopper layer (hopper/forward.cuh), one CTA per query
// tile.
template <class Traits>
struct SageWgmma {
  using Tile = wgmma::Tile<Traits>;
  using Barriers = wgmma::Barriers<Traits>;
  using Consumer = wgmma::Consumer<Traits>;
  const Params& params;
  const CUtensorMap *q_map, *k_map, *v_map;

  // The producer thread: INT8 Q, then per key tile (in order, or sparge-sage's kept list) the
  // INT8 K tile and the V tile into the next stage once the consumers have released it.
  __device__ __forceinline__ void produce(const Barriers& bar, std::uint32_t smem) const {
    if (threadIdx.x != 0) return;
    produce_tiles<GridSchedule, Tile, Traits::kStages>(
        params,
        [&](const Tile& tile) {
          barrier_arrive_expect_bytes(bar.q_full, Traits::kQBytes);
          tma_load_4d(smem + Traits::kQOffset, q_map, 0, tile.row_begin, tile.head, tile.batch, bar.q_full);
        },
        [&](const Tile& tile, const PipelineState<Traits::kStages>& kv, int key_begin) {
          load_stage<1>(bar.kv_empty, bar.k_full, kv, smem + Traits::kKOffset + kv.stage * Traits::kKBytes, 0,
                        Traits::kKBytes, k_map, key_begin, tile.kv_head, tile.batch);
          const std::uint32_t v_tile = smem + Traits::kVOffset + kv.stage * Traits::kVBytes;
          barrier_arrive_expect_bytes(bar.v_full[kv.stage], Traits::kVBytes);
          if constexpr (Traits::kMode == Mode::Sage2) {
            // Vᵀ8: coordinates (key, channel, kv head, batch); one box of 128 keys × head_dim rows.
            tma_load_4d(v_tile, v_map, key_begin, 0, tile.kv_head, tile.batch, bar.v_full[kv.stage]);
          } else {
            tma_load_slabs<Traits::kVSlabs>(v_tile, Traits::kVSlabBytes, v_map, key_begin, tile.kv_head, tile.batch,
                                            bar.v_full[kv.stage]);
          }
        });
  }

  static constexpr bool kSerialPingPong = Traits::kPingPong && !Traits::kOverlap;
  __device__ __forceinline__ bool overlapped() const { return Traits::kOverlap; }
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    sage_wgmma_forward_kernel(const __grid_constant__ Params params, const __grid_constant__ CUtensorMap q_map,
                              const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  warp_specialized_forward<Traits, GridSchedule>(SageWgmma<Traits>{params, &q_map, &k_map, &v_map});
#else
  (void)params;
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace attnsuite::cuda::sage::wgmma
