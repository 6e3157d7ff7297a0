// flash3-fp8's fused forward kernel (device code only): flash3's structure (kernel.cuh, over the
// Hopper layer cuda/hopper/) with e4m3 Q, K, V, per-tensor descale factors and bf16 output, one
// CTA per 128-row query tile (GridSchedule) or, with Traits::kPersistent, flash3's persistent
// schedules (Fp8Schedule).
//
// Differences from flash3:
//  - Q·Kᵀ is wgmma m64n128k32 e4m3 (Q and K K-major as TMA loads them: d contiguous);
//  - e4m3 wgmma reads B only K-major, so P·V needs Vᵀ (d × keys, keys contiguous): the producer
//    warpgroup's four warps transpose every V tile in shared memory into a second buffer, with
//    the keys of each 16-key group in the order of P's A-fragment registers (π, fp8_layout.hpp:
//    the transpose applies it for free, it chooses which rows it reads), then fence.proxy.async
//    and arrive on a "Vᵀ full" barrier that the consumers wait on;
//  - P is converted from the fp32 accumulator straight to e4m3 A-fragment registers.
//
// Scale factors: S is (Q₈·K₈ᵀ)·dq·dk, folded into the softmax's scale·log2e; O = (P₈·V₈)·dv / Σp,
// folded into the epilogue's 1/Σp. P = 2^(s − max) is in [0, 1] and is quantized as is.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/flash3/online_softmax.cuh"
#include "cuda/flash3/params.hpp"
#include "cuda/hopper/consumer.cuh"
#include "cuda/hopper/forward.cuh"
#include "cuda/hopper/fp8_layout.hpp"
#include "cuda/hopper/fp8_primitives.cuh"
#include "cuda/hopper/scheduler.cuh"

namespace attnsuite::cuda::flash3 {

using namespace hopper;  // the Hopper PTX wrappers (hopper/primitives.cuh)

// One warp's share of the transpose of a V tile (kTileN keys × head_dim bytes, TMA layout) into
// Vᵀ (head_dim rows × 128 key bytes, 128B swizzle, keys permuted by π). Lane l writes the
// 4-byte word of Vᵀ columns 4l..4l+3, i.e. keys 16·(l / 4) + 2·(l % 4) + {0, 1, 8, 9}, for 16 d
// rows per 16-byte block of V: 4 ld.shared.v4 (one 16-byte chunk of each key), 24 byte
// permutes, 16 st.shared.u32. The stores of a warp cover one full 128-byte Vᵀ row each: no bank
// conflicts; the loads hit 2 keys of the same swizzle row per 8 lanes (2-way).
template <class Traits>
__device__ __forceinline__ void transpose_v_tile(std::uint32_t v_tile, std::uint32_t vt_tile, int warp, int lane) {
  constexpr int kBlocks = Traits::kHeadDim / 16;
#pragma unroll
  for (int block = warp; block < kBlocks; block += Traits::kProducerWarps) {
    uint4 rows[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int key = fp8_layout::transpose_key(lane, q);
      rows[q] = load_shared_16(
          v_tile + swizzle<Traits::kSwizzleBytes>(static_cast<std::uint32_t>(key * Traits::kRowBytes + 16 * block)));
    }
    const std::uint32_t words[4][4] = {{rows[0].x, rows[0].y, rows[0].z, rows[0].w},
                                       {rows[1].x, rows[1].y, rows[1].z, rows[1].w},
                                       {rows[2].x, rows[2].y, rows[2].z, rows[2].w},
                                       {rows[3].x, rows[3].y, rows[3].z, rows[3].w}};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // words[q][i] holds d = 16·block + 4i + b of key q in byte b; out[b] gathers byte b of
      // the four keys (key q in byte q).
      const std::uint32_t low01 = __byte_perm(words[0][i], words[1][i], 0x5140);
      const std::uint32_t high01 = __byte_perm(words[0][i], words[1][i], 0x7362);
      const std::uint32_t low23 = __byte_perm(words[2][i], words[3][i], 0x5140);
      const std::uint32_t high23 = __byte_perm(words[2][i], words[3][i], 0x7362);
      const std::uint32_t out[4] = {__byte_perm(low01, low23, 0x5410), __byte_perm(low01, low23, 0x7632),
                                    __byte_perm(high01, high23, 0x5410), __byte_perm(high01, high23, 0x7632)};
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int d = 16 * block + 4 * i + b;
        store_shared_4(vt_tile + swizzle<128>(static_cast<std::uint32_t>(d * Traits::kVtRowBytes + 4 * lane)), out[b]);
      }
    }
  }
}

template <class Traits>
using Fp8Tile = WorkTile<Traits::kTileM, Traits::kTileN, false>;

// The order of the works: one CTA each (the grid), or from a 1-D grid head-major (the launcher
// starts min(works, SMs) looping CTAs on unmasked problems, one per work on masked ones) or in
// paired units (causal; one CTA a unit: flash3_fp8.cpp, persistent_order).
template <class Traits>
using Fp8Schedule = std::conditional_t<
    !Traits::kPersistent, GridSchedule,
    std::conditional_t<Traits::kOrder == WorkOrder::Paired, PersistentPairedSchedule, PersistentSchedule>>;

// The mbarriers: Q full, K full, V full (TMA), Vᵀ full (producer warps), K empty and Vᵀ empty
// (consumer warps) ×stages, and with persistent CTAs Q empty (consumer warps). Released
// separately (as in flash3): K after S_j has been waited, V/Vᵀ after P_j·V_j.
template <class Traits>
struct Fp8Barriers : BarrierSet<Traits::kStages, 5> {
  using BarrierSet<Traits::kStages, 5>::BarrierSet;
  BarrierRing<Traits::kStages> k_full = this->ring(0), v_full = this->ring(1), vt_full = this->ring(2),
                               k_empty = this->ring(3), vt_empty = this->ring(4);
  std::uint32_t q_empty = this->q_empty_entry();
  __device__ __forceinline__ void init() const {
    constexpr int kWarps = Traits::kConsumerWarps;
    BarrierSet<Traits::kStages, 5>::init({1, 1, Traits::kProducerWarps, kWarps, kWarps},
                                         Traits::kPersistent ? kWarps : 0);
  }
};

// A consumer thread's work (flash3's, kernel.cuh): P here is e4m3, 32 keys per A fragment of
// four registers; S's scale includes the Q and K descales, O's the V descale.
template <class Traits>
struct Fp8Consumer : ConsumerBase<Traits, Params, Fp8Tile<Traits>, 32> {
  using Base = ConsumerBase<Traits, Params, Fp8Tile<Traits>, 32>;
  using Base::acc_o, Base::acc_s, Base::row_max, Base::row_sum, Base::lane;
  using Base::kHeadDim, Base::kTileN, Base::params, Base::tile, Base::smem;
  std::uint32_t q_empty;
  std::uint64_t q_descriptor;
  // Per-tensor descales (written by the quantization pre-pass earlier on the stream).
  float descale_v, scale_log2, scale;

  template <class Kernel>
  __device__ __forceinline__ Fp8Consumer(const Kernel& kernel, const Fp8Tile<Traits>& tile_, int consumer,
                                         const Fp8Barriers<Traits>& bar, std::uint32_t smem_)
      : Base(kernel.params, tile_, consumer, smem_, bar.k_full, bar.vt_full, bar.k_empty, bar.vt_empty),
        q_empty(bar.q_empty),
        // This warpgroup's 64 Q rows start 64 rows into the tile (a multiple of the swizzle period).
        q_descriptor(matrix_descriptor_swizzled<Traits::kSwizzleBytes>(
            smem_ + Traits::kQOffset + consumer * Traits::kRowsPerConsumer * Traits::kRowBytes, 16,
            Traits::kSwizzlePeriod)) {
    const float descale_qk = kernel.descales[0] * kernel.descales[1];
    descale_v = kernel.descales[2];
    scale_log2 = params.scale_log2 * descale_qk;
    scale = params.scale * descale_qk;
#pragma unroll
    for (int i = 0; i < kTileN / 2; ++i) acc_s[i] = 0.0f;
  }

  // S = Q·Kᵀ: head dim / 32 k-steps of 32 bytes inside the swizzled row.
  __device__ __forceinline__ void issue_qk(int stage) {
    const std::uint64_t k_descriptor = matrix_descriptor_swizzled<Traits::kSwizzleBytes>(
        smem + Traits::kKOffset + stage * Traits::kKVBytes, 16, Traits::kSwizzlePeriod);
#pragma unroll
    for (int k_step = 0; k_step < kHeadDim / 32; ++k_step)
      wgmma_ss_e4m3<kTileN>(acc_s, q_descriptor + 2 * k_step, k_descriptor + 2 * k_step, k_step > 0 ? 1 : 0);
    wgmma_commit();
  }

  // Mask (boundary tiles only), then the online softmax in place (scale_log2 includes dq·dk).
  __device__ __forceinline__ void softmax(int n_block, float (&correction)[2]) {
    if (tile.masked(n_block)) this->mask(n_block);
    online_softmax_tile<kTileN>(acc_s, row_max, row_sum, scale_log2, correction);
  }

  __device__ __forceinline__ void issue_pv(int stage) {
    this->multiply_pv(acc_o, smem + Traits::kVtOffset + stage * Traits::kVtBytes, 0);
  }

  // Persistent: Q is free for the next work's once every consumer warp has waited its last Q·Kᵀ
  // (as flash3's consumer).
  __device__ __forceinline__ void release_q(bool last) {
    if constexpr (Traits::kPersistent) {
      if (last && lane == 0) barrier_arrive(q_empty);
    }
  }
  __device__ __forceinline__ void release_k(const PipelineState<Traits::kStages>& kv, bool last) {
    if (lane == 0) {
      this->k_empty.arrive(kv);
      if constexpr (Traits::kPersistent) {
        if (last) barrier_arrive(q_empty);
      }
    }
  }

  // Epilogue: O·dv / row sum, LSE = max·scale·dq·dk + ln(sum). A NaN score (NaN in Q or K, ±Inf
  // quantized to NaN) makes the sum NaN, and so O and LSE NaN (docs/reliability.md).
  __device__ __forceinline__ float o_factor(float sum) const { return descale_v / sum; }
  __device__ __forceinline__ float lse(int half, int, float sum) const { return row_max[half] * scale + logf(sum); }
};

// flash3-fp8 as policies over the Hopper layer (hopper/forward.cuh): one CTA per query tile, or the
// works of Fp8Schedule.
template <class Traits>
struct Fp8 {
  using Tile = Fp8Tile<Traits>;
  using Barriers = Fp8Barriers<Traits>;
  using Consumer = Fp8Consumer<Traits>;
  const Params& params;
  const float* descales;
  const CUtensorMap *q_map, *k_map, *v_map;

  // The producer warpgroup: thread 0 issues the TMA copies (Q — persistent: once every consumer
  // warp has waited its last Q·Kᵀ of the previous work, "Q empty" —, then per tile K and V once
  // the consumers are done with K, then Vᵀ — made from this stage's previous V — of the stage's
  // previous tile); all four warps transpose each V tile into Vᵀ once it has landed.
  __device__ __forceinline__ void produce(const Barriers& bar, std::uint32_t smem) const {
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    constexpr int kBytes = Traits::kKVBytes;
    [[maybe_unused]] std::uint32_t q_phase = 0;  // persistent only
    produce_tiles<Fp8Schedule<Traits>, Tile, Traits::kStages>(
        params,
        [&](const Tile& tile) {
          if (threadIdx.x != 0) return;
          if constexpr (Traits::kPersistent) {
            barrier_wait(bar.q_empty, q_phase ^ 1u);
            q_phase ^= 1u;
          }
          barrier_arrive_expect_bytes(bar.q_full, Traits::kQBytes);
          tma_load_4d(smem + Traits::kQOffset, q_map, 0, tile.row_begin, tile.head, tile.batch, bar.q_full);
        },
        [&](const Tile& tile, const PipelineState<Traits::kStages>& kv, int key_begin) {
          const std::uint32_t v_tile = smem + Traits::kVOffset + kv.stage * kBytes;
          if (threadIdx.x == 0) {
            load_stage<1>(bar.k_empty, bar.k_full, kv, smem + Traits::kKOffset + kv.stage * kBytes, 0, kBytes, k_map,
                          key_begin, tile.kv_head, tile.batch);
            load_stage<1>(bar.vt_empty, bar.v_full, kv, v_tile, 0, kBytes, v_map, key_begin, tile.kv_head, tile.batch);
          }
          // V has landed (and so the stage was released: thread 0 waited for that before the copy).
          bar.v_full.wait(kv);
          transpose_v_tile<Traits>(v_tile, smem + Traits::kVtOffset + kv.stage * Traits::kVtBytes, warp, lane);
          fence_proxy_async_shared();
          __syncwarp();
          if (lane == 0) bar.vt_full.arrive(kv);
        });
  }

  // v2 (the default): overlapped, with ping-pong; v1 (params.serial_schedule): serial.
  static constexpr bool kSerialPingPong = false;
  __device__ __forceinline__ bool overlapped() const { return !params.serial_schedule; }
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash3_fp8_forward_kernel(const __grid_constant__ Params params, const float* __restrict__ descales,
                              const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                              const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  warp_specialized_forward<Traits, Fp8Schedule<Traits>>(Fp8<Traits>{params, descales, &q_map, &k_map, &v_map});
#else
  (void)params;
  (void)descales;
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace attnsuite::cuda::flash3
