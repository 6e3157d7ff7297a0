// flash3's fused forward kernel (device code only): FlashAttention-3's structure on sm_90a, as
// policies over the Hopper layer (cuda/hopper/).
//
// One CTA per SM (persistent) or per work (a query tile of 64 · kConsumers rows of one q head and
// batch); 1 + kConsumers warpgroups (kConsumers = 2, 128-row tiles, by default; 3, 192-row tiles,
// for kernel config "m192" at d64):
//  - warpgroup 0, the producer, gives most of its registers away (setmaxnreg.dec) and one of its
//    threads issues every TMA copy: Q once per work, then K and V tiles into a kStages-deep
//    shared ring (hopper/pipeline.cuh);
//  - warpgroups 1 .. kConsumers, the consumers, take the registers (setmaxnreg.inc) and own 64
//    query rows each: per K/V tile, S = Q·Kᵀ with wgmma (both operands in shared memory), the
//    online softmax in registers (exp2, scale·log2e folded in, O rescaled every tile), P rounded
//    to the input dtype in registers and O += P·V with wgmma (A = P from registers, B = V read
//    transposed from shared memory), in one of two schedules (hopper/mainloop.cuh). Epilogue:
//    O / row sum and LSE straight to global memory (hopper/epilogue.cuh).
// Only the K tiles that some row of the CTA sees are visited (causal / window early exit); the
// element mask is applied only on tiles that cross a mask boundary or the end of the keys.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/key_range.cuh"
#include "cuda/flash3/online_softmax.cuh"
#include "cuda/flash3/params.hpp"
#include "cuda/hopper/consumer.cuh"
#include "cuda/hopper/forward.cuh"
#include "cuda/hopper/scheduler.cuh"

namespace attnsuite::cuda::flash3 {

using namespace hopper;

template <class Traits>
using Tile = WorkTile<Traits::kTileM, Traits::kTileN, Traits::kTakesBlockList>;

// The order of the works (traits, hopper/scheduler.cuh).
template <class Traits>
using Schedule = std::conditional_t<
    Traits::kOrder == WorkOrder::LongestFirst, PersistentLongestFirstSchedule,
    std::conditional_t<Traits::kOrder == WorkOrder::Paired, PersistentPairedSchedule, PersistentSchedule>>;

// The mbarriers: Q full, K full, V full, K empty, V empty (×stages), Q empty. K and V stages are
// released separately: the overlapped schedule is done with K_j (S_j waited) one P·V earlier than
// with V_j.
template <class Traits>
struct Barriers : BarrierSet<Traits::kStages, 4> {
  using BarrierSet<Traits::kStages, 4>::BarrierSet;
  BarrierRing<Traits::kStages> k_full = this->ring(0), v_full = this->ring(1), k_empty = this->ring(2),
                               v_empty = this->ring(3);
  std::uint32_t q_empty = this->q_empty_entry();
  __device__ __forceinline__ void init() const {
    constexpr int kWarps = Traits::kConsumerWarps;
    BarrierSet<Traits::kStages, 4>::init({1, 1, kWarps, kWarps}, kWarps);
  }
};

// A consumer thread's work: its registers (ConsumerBase) and the GEMMs and softmax on them.
template <class Traits>
struct Consumer : ConsumerBase<Traits, Params, Tile<Traits>, 16> {
  using Base = ConsumerBase<Traits, Params, Tile<Traits>, 16>;
  using Base::acc_o, Base::acc_s, Base::row_max, Base::row_sum, Base::lane, Base::quad_col, Base::thread_row;
  using Base::kHeadDim, Base::kTileN, Base::params, Base::tile, Base::smem;
  std::uint32_t q_empty;
  std::uint64_t q_descriptor;
  // Traits::kPrecomputedKeyRanges: the keys [begin, end) of the thread's two rows, each less
  // 2·quad_col (the thread's first column in every 8), computed once per work.
  int key_begin_less_col[2] = {0, 0}, key_end_less_col[2] = {0, 0};

  template <class Kernel>
  __device__ __forceinline__ Consumer(const Kernel& kernel, const Tile<Traits>& tile_, int consumer,
                                      const Barriers<Traits>& bar, std::uint32_t smem_)
      : Base(kernel.params, tile_, consumer, smem_, bar.k_full, bar.v_full, bar.k_empty, bar.v_empty),
        q_empty(bar.q_empty),
        // This warpgroup's 64 Q rows: consumer · 8 KiB into every Q slab (a multiple of the
        // 1024-byte period: TMA's 128B swizzle of the kTileM-row box then matches a 64-row box there).
        q_descriptor(matrix_descriptor(
            smem_ + Traits::kQOffset + consumer * Traits::kRowsPerConsumer * Traits::kSlabRowBytes, 16, 1024)) {
    if constexpr (Traits::kPrecomputedKeyRanges) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const KeyRange keys = key_range(params, thread_row + 8 * half);
        key_begin_less_col[half] = keys.begin - 2 * quad_col;
        key_end_less_col[half] = keys.end - 2 * quad_col;
      }
    }
#pragma unroll
    for (int i = 0; i < kTileN / 2; ++i) acc_s[i] = 0.0f;
  }

  // S = Q·Kᵀ: head dim / 16 k-steps; a k-step is 32 bytes into a 128-byte swizzled row, and every
  // 4 k-steps the next 64-column slab (the hardware applies the swizzle to the address).
  // Descriptors are built once per tile and advanced by adding the encoded byte offset to the
  // start-address field (addresses stay below 2^18, so the field never carries over).
  __device__ __forceinline__ void issue_qk(int stage) {
    const std::uint64_t k_descriptor = matrix_descriptor(smem + Traits::kKOffset + stage * Traits::kKVBytes, 16, 1024);
#pragma unroll
    for (int k_step = 0; k_step < kHeadDim / 16; ++k_step) {
      const std::uint32_t column_bytes = static_cast<std::uint32_t>((k_step % 4) * 32);
      wgmma_ss<typename Traits::Element, kTileN>(
          acc_s, q_descriptor + ((k_step / 4) * Traits::kQSlabBytes + column_bytes) / 16,
          k_descriptor + ((k_step / 4) * Traits::kKVSlabBytes + column_bytes) / 16, k_step > 0 ? 1 : 0);
    }
    wgmma_commit();
  }

  // Mask (boundary tiles only), then the online softmax in place: P = 2^(S·scale·log2e − max),
  // the row sums updated; correction = 2^((old max − new max)·scale·log2e) for O.
  __device__ __forceinline__ void softmax(int n_block, float (&correction)[2]) {
    if (tile.masked(n_block)) {
      if constexpr (Traits::kPrecomputedKeyRanges) {
        // Column 8i + e of this thread is key key_begin + 8i + 2·quad_col + e.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int begin = key_begin_less_col[half] - n_block * kTileN;
          const int end = key_end_less_col[half] - n_block * kTileN;
#pragma unroll
          for (int i = 0; i < kTileN / 8; ++i)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (8 * i + e < begin || 8 * i + e >= end) acc_s[4 * i + 2 * half + e] = -INFINITY;
        }
      } else {
        this->mask(n_block);
      }
    }
    online_softmax_tile<kTileN, Traits::kFmaExp2Every>(acc_s, row_max, row_sum, params.scale_log2, correction);
  }

  __device__ __forceinline__ void issue_pv(int stage) {
    this->multiply_pv(acc_o, smem + Traits::kVOffset + stage * Traits::kKVBytes, Traits::kKVSlabBytes);
  }

  // Q is free for the next work's once every consumer warp has waited its last Q·Kᵀ.
  __device__ __forceinline__ void release_q(bool last) {
    if (last && lane == 0) barrier_arrive(q_empty);
  }
  __device__ __forceinline__ void release_k(const PipelineState<Traits::kStages>& kv, bool last) {
    if (lane == 0) {
      this->k_empty.arrive(kv);
      if (last) barrier_arrive(q_empty);
    }
  }

  // LSE = max·scale + ln(sum).
  __device__ __forceinline__ float lse(int half, int, float sum) const {
    return row_max[half] * params.scale + logf(sum);
  }
};

// flash3 as policies over the Hopper layer (hopper/forward.cuh).
template <class Traits>
struct Flash3 {
  using Tile = flash3::Tile<Traits>;
  using Barriers = flash3::Barriers<Traits>;
  using Consumer = flash3::Consumer<Traits>;
  const Params& params;
  const CUtensorMap *q_map, *k_map, *v_map;

  // The producer: one thread issues every TMA copy. Per work, Q (once every consumer warp has
  // waited its last Q·Kᵀ of the previous work: "Q empty"; a fresh barrier lets the first
  // through), then each K and V tile, so the producer loads the next work's Q and first K/V
  // tiles while the consumers still finish the current one.
  __device__ __forceinline__ void produce(const Barriers& bar, std::uint32_t smem) const {
    if (threadIdx.x != 0) return;
    constexpr int kSlabs = Traits::kSlabs, kBytes = Traits::kKVBytes, kSlabBytes = Traits::kKVSlabBytes;
    std::uint32_t q_phase = 0;
    produce_tiles<Schedule<Traits>, Tile, Traits::kStages>(
        params,
        [&](const Tile& tile) {
          barrier_wait(bar.q_empty, q_phase ^ 1u);
          barrier_arrive_expect_bytes(bar.q_full, Traits::kQBytes);
          tma_load_slabs<kSlabs>(smem + Traits::kQOffset, Traits::kQSlabBytes, q_map, tile.row_begin, tile.head,
                                 tile.batch, bar.q_full);
          q_phase ^= 1u;
        },
        [&](const Tile& tile, const PipelineState<Traits::kStages>& kv, int key_begin) {
          const std::uint32_t offset = kv.stage * kBytes;
          load_stage<kSlabs>(bar.k_empty, bar.k_full, kv, smem + Traits::kKOffset + offset, kSlabBytes, kBytes, k_map,
                             key_begin, tile.kv_head, tile.batch);
          load_stage<kSlabs>(bar.v_empty, bar.v_full, kv, smem + Traits::kVOffset + offset, kSlabBytes, kBytes, v_map,
                             key_begin, tile.kv_head, tile.batch);
        });
  }

  // v2 (the default): overlapped, with ping-pong; v1 (params.serial_schedule, kernel config "v1",
  // 2 consumers only: "m192" is v2's schedule on three): serial, unsynchronized.
  static constexpr bool kSerialPingPong = false;
  __device__ __forceinline__ bool overlapped() const { return !(Traits::kConsumers == 2 && params.serial_schedule); }
};

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash3_forward_kernel(const __grid_constant__ Params params, const __grid_constant__ CUtensorMap q_map,
                          const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  warp_specialized_forward<Traits, Schedule<Traits>>(Flash3<Traits>{params, &q_map, &k_map, &v_map});
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace attnsuite::cuda::flash3
