// A consumer thread of the Hopper kernels: its registers across a work (O, S, P, the online
// softmax's row maximum and sum of its two rows) and the main loop's hooks (mainloop.cuh) as the
// kernels share them; a kernel's consumer derives from it, adds its GEMMs and softmax, and
// overrides what differs.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/key_range.cuh"
#include "cuda/hopper/fp8_layout.hpp"
#include "cuda/hopper/fp8_primitives.cuh"
#include "cuda/hopper/pipeline.cuh"

namespace attnsuite::cuda::hopper {

// The wgmma accumulator layout: thread t of the consumer warpgroup holds rows
// 16·(t / 32) + (t % 32) / 4 + 8·half (half 0, 1) of its 64, columns 8i + 2·(t % 4) + e in
// entry 4i + 2·half + e. Traits: the kernel's (Element: the 16-bit dtype of P, V and O; kHeadDim,
// kTileN, kStages); kKeysPerStep: keys per k-step of P·V (16-bit P: 16, e4m3: 32); Score: S's
// entry type (float; sage: the INT8 product's bits).
template <class Traits, class Params, class Tile, int kKeysPerStep, class Score = float>
struct ConsumerBase {
  static constexpr int kHeadDim = Traits::kHeadDim, kTileN = Traits::kTileN, kStages = Traits::kStages;
  using Element = typename Traits::Element;
  float acc_o[kHeadDim / 2];
  Score acc_s[kTileN / 2];
  std::uint32_t p[kTileN / kKeysPerStep][4];
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  int lane, quad_col, thread_row;
  const Params& params;
  const Tile& tile;
  std::uint32_t smem;  // the kernel's shared memory (pipeline.cuh: shared_base_1024)
  BarrierRing<kStages> k_full, v_full, k_empty, v_empty;

  // consumer: 0 .. consumers - 1, 64 rows each from the tile's row_begin.
  __device__ __forceinline__ ConsumerBase(const Params& params_, const Tile& tile_, int consumer, std::uint32_t smem_,
                                          const BarrierRing<kStages>& k_full_, const BarrierRing<kStages>& v_full_,
                                          const BarrierRing<kStages>& k_empty_, const BarrierRing<kStages>& v_empty_)
      : params(params_),
        tile(tile_),
        smem(smem_),
        k_full(k_full_),
        v_full(v_full_),
        k_empty(k_empty_),
        v_empty(v_empty_) {
    const int warpgroup_thread = static_cast<int>(threadIdx.x) % 128;
    lane = warpgroup_thread % 32;
    quad_col = lane % 4;
    thread_row = tile.row_begin + 64 * consumer + 16 * (warpgroup_thread / 32) + lane / 4;
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) acc_o[i] = 0.0f;
  }

  // Scores of keys outside their row's range (key_range) → -inf (float bits for sage's int S):
  // column 8i + 2·quad_col + e of tile n_block is key n_block·kTileN + 8i + 2·quad_col + e.
  __device__ __forceinline__ void mask(int n_block) {
    const int key_begin = n_block * kTileN;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const KeyRange keys = key_range(params, thread_row + 8 * half);
#pragma unroll
      for (int i = 0; i < kTileN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key_begin + 8 * i + 2 * quad_col + e;
          if (key < keys.begin || key >= keys.end) {
            if constexpr (std::is_same_v<Score, float>) {
              acc_s[4 * i + 2 * half + e] = -INFINITY;
            } else {
              acc_s[4 * i + 2 * half + e] = __float_as_uint(-INFINITY);
            }
          }
        }
    }
  }

  __device__ __forceinline__ float score(int entry) const {
    if constexpr (std::is_same_v<Score, float>) {
      return acc_s[entry];
    } else {
      return __uint_as_float(acc_s[entry]);
    }
  }
  // P (S after the softmax) as the A fragments of P·V: 16-bit, S entries 8j .. 8j+7 (columns
  // 16j .. 16j+15) in the order of the k16 fragment's four registers; e4m3, entries 16j .. 16j+15
  // (keys 32j + 8i + 2c + e) in the k32 fragment's order: a[0] = row g keys 2c, 2c+1, 2c+8, 2c+9,
  // a[1] the same of row g+8, a[2] / a[3] those keys + 16 — the π order Vᵀ holds its keys in
  // (fp8_layout.hpp), so no lane exchanges P.
  __device__ __forceinline__ void convert_p() {
#pragma unroll
    for (int j = 0; j < kTileN / kKeysPerStep; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if constexpr (kKeysPerStep == 16) {
          p[j][r] = pack_pair<Element>(score(8 * j + 2 * r), score(8 * j + 2 * r + 1));
        } else {
          using fp8_layout::p_entry;
          const int s = 16 * j;
          p[j][r] = pack_e4m3x4(score(s + p_entry(r, 0)), score(s + p_entry(r, 1)), score(s + p_entry(r, 2)),
                                score(s + p_entry(r, 3)));
        }
      }
  }
  // acc (+)= P·V of a stage, committed: 16-bit P, V in 64-column slabs of slab_bytes read
  // transposed (k-step j: keys 16j .. 16j+15, two 8-row groups of every slab); e4m3 P, Vᵀ rows of
  // 128 keys, 128B swizzle (k-step j: bytes 32j .. 32j+31 of every row). fresh: the first k-step
  // overwrites acc (sage2's per-tile product).
  __device__ __forceinline__ void multiply_pv(float (&acc)[kHeadDim / 2], std::uint32_t v_tile, int slab_bytes,
                                              bool fresh = false) {
    if constexpr (kKeysPerStep == 16) {
      const std::uint64_t v_descriptor = matrix_descriptor(v_tile, slab_bytes, 1024);
#pragma unroll
      for (int j = 0; j < kTileN / 16; ++j) wgmma_rs<Element, kHeadDim>(acc, p[j], v_descriptor + j * 16 * 128 / 16, 1);
    } else {
      const std::uint64_t vt_descriptor = matrix_descriptor_swizzled<128>(v_tile, 16, 1024);
#pragma unroll
      for (int j = 0; j < kTileN / 32; ++j)
        wgmma_rs_e4m3<kHeadDim>(acc, p[j], vt_descriptor + 2 * j, fresh && j == 0 ? 0 : 1);
    }
    wgmma_commit();
  }

  // The main loop's hooks: prepare(n_block) before a tile's waits (sage: its K scales);
  // fence_qk() the registers Q·Kᵀ's asm reads (S), before its wgmma.fence; fence_s() S after its
  // wait; fence_pv(), fence_p() P·V's accumulator and A fragments, around its wgmma.
  __device__ __forceinline__ void prepare(int) {}
  __device__ __forceinline__ void fence_qk() { fence_registers(acc_s); }
  __device__ __forceinline__ void fence_s() { fence_registers(acc_s); }
  __device__ __forceinline__ void fence_pv() { fence_registers(acc_o); }
  __device__ __forceinline__ void fence_p() {
#pragma unroll
    for (int j = 0; j < kTileN / kKeysPerStep; ++j) fence_registers(p[j]);
  }
  // O's correction: O *= correction (per row) before the next P·V adds to it; the serial schedule
  // calls rescale_o before P·V and accumulate after; the overlapped one begin_o on the first
  // tile, update_o once the previous P·V has completed, finish_o after the last.
  __device__ __forceinline__ void rescale_o(const float (&correction)[2]) {
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[4 * i + e] *= correction[e / 2];
  }
  __device__ __forceinline__ void accumulate(const float (&)[2]) {}
  __device__ __forceinline__ void begin_o(const float (&)[2]) {}
  __device__ __forceinline__ void update_o(const float (&correction)[2]) { rescale_o(correction); }
  __device__ __forceinline__ void finish_o() {}
  // This warp's reads of a stage's K and V have completed (its wgmma waited): lane 0 arrives.
  __device__ __forceinline__ void release_q(bool) {}
  __device__ __forceinline__ void release_k(const PipelineState<kStages>& kv, bool) {
    if (lane == 0) k_empty.arrive(kv);
  }
  __device__ __forceinline__ void release_v(const PipelineState<kStages>& kv) {
    if (lane == 0) v_empty.arrive(kv);
  }
  __device__ __forceinline__ void release_stage(const PipelineState<kStages>& kv) {
    if (lane == 0) {
      k_empty.arrive(kv);
      v_empty.arrive(kv);
    }
  }
  // The epilogue (epilogue.cuh): O's factor of a row of sum `sum`, and of its column 8i + e.
  __device__ __forceinline__ float o_factor(float sum) const { return 1.0f / sum; }
  __device__ __forceinline__ float o_scale(float factor, int, int) const { return factor; }
  __device__ __forceinline__ void begin_epilogue() {}
};

}  // namespace attnsuite::cuda::hopper
