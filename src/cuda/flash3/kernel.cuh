// flash3's fused forward kernel (device code only): FlashAttention-3's structure on sm_90a.
//
// One CTA per (query tile of 64 · kConsumers rows, q head, batch); 1 + kConsumers warpgroups
// (kConsumers = 2, 128-row tiles, by default; 3, 192-row tiles, for kernel config "m192" at d64):
//  - warpgroup 0, the producer, gives most of its registers away (setmaxnreg.dec) and one of its
//    threads issues every TMA copy: Q once, then K and V tiles into a kStages-deep shared ring,
//    each stage guarded by a "full" mbarrier per tensor (transaction bytes) and an "empty" one
//    that the consumers' warps arrive on when they are done with the stage;
//  - warpgroups 1 .. kConsumers, the consumers, take the registers (setmaxnreg.inc) and own 64 query
//    rows each: per K/V tile, S = Q·Kᵀ with wgmma (both operands in shared memory), the online
//    softmax in registers (exp2, scale·log2e folded in, O rescaled every tile), P rounded to the
//    input dtype in registers and O += P·V with wgmma (A = P from registers, B = V read
//    transposed from shared memory). Epilogue: O / row sum and LSE straight to global memory.
// Only the K tiles that some row of the CTA sees are visited (causal / window early exit); the
// element mask is applied only on tiles that cross a mask boundary or the end of the keys.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/key_range.cuh"
#include "cuda/flash3/online_softmax.cuh"
#include "cuda/flash3/params.hpp"
#include "cuda/hopper/pipeline.cuh"
#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::flash3 {

using namespace hopper;  // the Hopper PTX wrappers (hopper/primitives.cuh)

// A consumer thread's registers across the main loop: O and S accumulators, P (S rounded to the
// input dtype, as P·V's A fragments) and the online softmax's row max and sum for its two rows.
template <class Traits>
struct ConsumerState {
  float acc_o[Traits::kHeadDim / 2];
  float acc_s[Traits::kTileN / 2];
  std::uint32_t p[Traits::kTileN / 16][4];
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  int thread_row = 0, quad_col = 0;
  int unmasked_key_begin = 0, unmasked_key_end = 0;
  // Traits::kPrecomputedKeyRanges (m192): the keys [begin, end) of the thread's two rows, each
  // less 2·quad_col (the thread's first column in every 8), computed once before the main loop.
  int key_begin_less_col[2] = {0, 0}, key_end_less_col[2] = {0, 0};
};

// S = Q·Kᵀ: head dim / 16 k-steps; a k-step is 32 bytes into a 128-byte swizzled row, and every
// 4 k-steps the next 64-column slab (the hardware applies the swizzle to the address).
// Descriptors are built once per tile and advanced by adding the encoded byte offset to the
// start-address field (addresses stay below 2^18, so the field never carries over).
template <class Traits>
__device__ __forceinline__ void issue_qk(float (&acc_s)[Traits::kTileN / 2], std::uint64_t q_descriptor,
                                         std::uint32_t k_tile) {
  const std::uint64_t k_descriptor = matrix_descriptor(k_tile, 16, 1024);
#pragma unroll
  for (int k_step = 0; k_step < Traits::kHeadDim / 16; ++k_step) {
    const std::uint32_t column_bytes = static_cast<std::uint32_t>((k_step % 4) * 32);
    wgmma_ss<typename Traits::Element, Traits::kTileN>(
        acc_s, q_descriptor + ((k_step / 4) * Traits::kQSlabBytes + column_bytes) / 16,
        k_descriptor + ((k_step / 4) * Traits::kKVSlabBytes + column_bytes) / 16, k_step > 0 ? 1 : 0);
  }
}

// O += P·V: k-step j reads keys 16j .. 16j+15 = two 8-row groups of every V slab.
template <class Traits>
__device__ __forceinline__ void issue_pv(ConsumerState<Traits>& state, std::uint32_t v_tile) {
  const std::uint64_t v_descriptor = matrix_descriptor(v_tile, Traits::kKVSlabBytes, 1024);
#pragma unroll
  for (int j = 0; j < Traits::kTileN / 16; ++j)
    wgmma_rs<typename Traits::Element, Traits::kHeadDim>(state.acc_o, state.p[j],
                                                         v_descriptor + j * 16 * Traits::kSlabRowBytes / 16, 1);
}

template <class Traits>
__device__ __forceinline__ void fence_p(ConsumerState<Traits>& state) {
#pragma unroll
  for (int j = 0; j < Traits::kTileN / 16; ++j) fence_registers(state.p[j]);
}

// Mask (boundary tiles only), then the online softmax in place: P = 2^(S·scale·log2e − max),
// the row sums updated; correction = 2^((old max − new max)·scale·log2e) for O.
template <class Traits>
__device__ __forceinline__ void softmax_tile(const Params& params, ConsumerState<Traits>& state, int n_block,
                                             float (&correction)[2]) {
  constexpr int kTileN = Traits::kTileN;
  const int key_begin = n_block * kTileN;
  if (key_begin < state.unmasked_key_begin || key_begin + kTileN > state.unmasked_key_end) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if constexpr (Traits::kPrecomputedKeyRanges) {
        // Column 8i + e of this thread is key key_begin + 8i + 2·quad_col + e.
        const int begin = state.key_begin_less_col[half] - key_begin;
        const int end = state.key_end_less_col[half] - key_begin;
#pragma unroll
        for (int i = 0; i < kTileN / 8; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * i + e < begin || 8 * i + e >= end) state.acc_s[4 * i + 2 * half + e] = -INFINITY;
      } else {
        const KeyRange keys = key_range(params, state.thread_row + 8 * half);
#pragma unroll
        for (int i = 0; i < kTileN / 8; ++i)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = key_begin + 8 * i + 2 * state.quad_col + e;
            if (key < keys.begin || key >= keys.end) state.acc_s[4 * i + 2 * half + e] = -INFINITY;
          }
      }
    }
  }
  online_softmax_tile<kTileN, Traits::kFmaExp2Every>(state.acc_s, state.row_max, state.row_sum, params.scale_log2,
                                                     correction);
}

// O's previous P·V has completed (waited), so it can be rescaled in registers.
template <class Traits>
__device__ __forceinline__ void rescale_o(ConsumerState<Traits>& state, const float (&correction)[2]) {
#pragma unroll
  for (int i = 0; i < Traits::kHeadDim / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) state.acc_o[4 * i + e] *= correction[e / 2];
}

// P as the A operand of P·V, 16 keys per k-step: S columns 16j .. 16j+15 are accumulator entries
// 8j .. 8j+7, in the order of the A fragment's four registers.
template <class Traits>
__device__ __forceinline__ void convert_p(ConsumerState<Traits>& state) {
#pragma unroll
  for (int j = 0; j < Traits::kTileN / 16; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      state.p[j][r] = pack_pair<typename Traits::Element>(state.acc_s[8 * j + 2 * r], state.acc_s[8 * j + 2 * r + 1]);
}

// One work item: a (query tile, q head, batch) and the key tiles it visits. Work w has query
// tile m = q_tiles − 1 − w % q_tiles (the heavy, late causal tiles of a head first), head and
// batch from w / q_tiles: consecutive works share a head's K and V (read from L2 by the CTAs
// that run them at the same time).
template <class Traits>
struct WorkTile {
  int m_block = 0, head = 0, batch = 0, kv_head = 0, row_begin = 0;
  KeyRange first_row_keys, last_row_keys;
  int n_block_min = 0;
  int tiles = 0;              // key tiles visited; <= 0: no row of the tile sees a key
  const int* kept = nullptr;  // block-sparse: the visited tiles; null: n_block_min + visit

  __device__ __forceinline__ WorkTile(const Params& params, int work) {
    constexpr int kTileM = Traits::kTileM, kTileN = Traits::kTileN;
    m_block = params.q_tiles - 1 - work % params.q_tiles;
    const int head_batch = work / params.q_tiles;
    head = head_batch % params.heads_q;
    batch = head_batch / params.heads_q;
    kv_head = head / params.group_size;
    row_begin = m_block * kTileM;
    const int row_last = min(row_begin + kTileM, params.seq_q) - 1;
    // Keys any row of this tile sees: [first row's begin, last row's end). Rows are monotone.
    first_row_keys = key_range(params, row_begin);
    last_row_keys = key_range(params, row_last);
    n_block_min = first_row_keys.begin / kTileN;
    const int n_block_max = (last_row_keys.end + kTileN - 1) / kTileN;
    tiles = n_block_max - n_block_min;
    // (Only the 128 × 128 configs read block lists: Traits::kTakesBlockList.) Every thread reads
    // the same list entry (a broadcast load, L1-resident after the first).
    if (Traits::kTakesBlockList && params.block_index != nullptr) {
      const std::int64_t slot = (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.m_blocks + m_block;
      kept = params.block_index + slot * params.n_blocks;
      tiles = params.block_count[slot];
    }
    if (n_block_max <= n_block_min || last_row_keys.end <= first_row_keys.begin) tiles = 0;
  }
  __device__ __forceinline__ int block(int visit) const {
    return kept != nullptr ? __ldg(kept + visit) : n_block_min + visit;
  }
};

// Epilogue of a consumer thread's two rows: O /= row sum, LSE = max·scale + ln(sum); rows that saw
// no key (row sum 0, which is also a work tile without keys: the state as reset) get O = 0 and
// LSE = -inf.
template <class Traits>
__device__ __forceinline__ void store_rows(const Params& params, const ConsumerState<Traits>& state,
                                           const WorkTile<Traits>& tile) {
  using Element = typename Traits::Element;
  auto* o_head =
      static_cast<Element*>(params.o) + tile.batch * params.o_batch_stride + tile.head * params.o_head_stride;
  float* lse_head =
      params.lse != nullptr
          ? params.lse + (static_cast<std::int64_t>(tile.batch) * params.heads_q + tile.head) * params.seq_q
          : nullptr;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // sum == 0 only where the row saw no key: O = 0 even where V holds NaN/Inf (P·V gave
    // 0·NaN there). A NaN sum (NaN or +Inf in the row's scores) propagates to O and the LSE.
    const float sum = quad_sum(state.row_sum[half]);
    const bool seen = sum != 0.0f;
    const float inverse = 1.0f / sum;
    const int row = state.thread_row + 8 * half;
    if (row < params.seq_q) {
      if (lse_head != nullptr && state.quad_col == 0) {
        lse_head[row] = seen ? state.row_max[half] * params.scale + logf(sum) : -INFINITY;
      }
      Element* o_row = o_head + row * params.o_row_stride + 2 * state.quad_col;
#pragma unroll
      for (int i = 0; i < Traits::kHeadDim / 8; ++i) {
        *reinterpret_cast<std::uint32_t*>(o_row + 8 * i) =
            pack_pair<Element>(seen ? state.acc_o[4 * i + 2 * half] * inverse : 0.0f,
                               seen ? state.acc_o[4 * i + 2 * half + 1] * inverse : 0.0f);
      }
    }
  }
}

// Persistent: the grid has min(works, SMs) CTAs (params.persistent; one CTA per work when not)
// and CTA b runs works b, b + gridDim.x, ... The barriers, the K/V ring's stage and phase and the
// ping-pong continue from one work to the next, so the producer loads the next work's Q (as soon
// as every consumer warp has waited its last Q·Kᵀ: "Q empty") and first K/V tiles while the
// consumers still run the last softmax, P·V and epilogue of the current one. The static
// round-robin balances works of equal cost only: the host runs masked (causal, windowed)
// problems one CTA per work, where the hardware hands out the next CTA to whichever SM is free
// (measured on the H200: persistent causal d128 N 16k 1.49x slower; a model of the round-robin
// gives 1.57x max/mean work per CTA there). Next: take works from a global atomic counter; a
// first try hung at once because it raised the producer's setmaxnreg to 32, and a CTA of 384
// threads is launched with 384·168 registers: 128·32 + 256·240 exceeds that, so the consumers'
// setmaxnreg.inc waits forever.
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash3_forward_kernel(const __grid_constant__ Params params, const __grid_constant__ CUtensorMap q_map,
                          const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kTileN = Traits::kTileN;
  constexpr int kStages = Traits::kStages, kSlabs = Traits::kSlabs;
  const int first_work = static_cast<int>(blockIdx.x), work_stride = static_cast<int>(gridDim.x);

  // Shared memory, as 32-bit shared-window addresses from a 1024-byte aligned base.
  extern __shared__ __align__(1024) unsigned char shared_bytes[];
  const std::uint32_t smem = (shared_address(shared_bytes) + 1023u) & ~1023u;
  const std::uint32_t smem_q = smem + Traits::kQOffset;
  const std::uint32_t smem_k = smem + Traits::kKOffset;
  const std::uint32_t smem_v = smem + Traits::kVOffset;
  const std::uint32_t q_full = smem + Traits::kBarrierOffset;
  const std::uint32_t q_empty = q_full + 8u * static_cast<std::uint32_t>(1 + 4 * kStages);
  const BarrierRing<kStages> k_full{q_full, 1}, v_full{q_full, 1 + kStages};
  // K and V stages are released separately: v2 is done with K_j (S_j waited) one P·V earlier
  // than with V_j, so the producer can refill K's slot while V's is still being read.
  const BarrierRing<kStages> k_empty{q_full, 1 + 2 * kStages}, v_empty{q_full, 1 + 3 * kStages};

  if (threadIdx.x == 0) {
    barrier_init(q_full, 1);
    barrier_init(q_empty, Traits::kConsumerWarps);
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(k_full[stage], 1);
      barrier_init(v_full[stage], 1);
      barrier_init(k_empty[stage], Traits::kConsumerWarps);
      barrier_init(v_empty[stage], Traits::kConsumerWarps);
    }
    barrier_init_fence();
  }
  __syncthreads();

  // Broadcast from lane 0 so that the compiler knows it is warp-uniform: what derives from it
  // (shared addresses, wgmma descriptors) can then live in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (warpgroup == 0) {
    // ---- Producer ----
    release_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      std::uint32_t q_phase = 0;
      PipelineState<kStages> kv;
      for (int work = first_work; work < params.works; work += work_stride) {
        const WorkTile<Traits> tile(params, work);
        if (tile.tiles <= 0) continue;  // the consumers write O = 0, LSE = -inf
        // Every consumer warp has waited its last Q·Kᵀ of the previous work (fresh barrier:
        // parity 1 returns at once).
        barrier_wait(q_empty, q_phase ^ 1u);
        barrier_arrive_expect_bytes(q_full, Traits::kQBytes);
#pragma unroll
        for (int slab = 0; slab < kSlabs; ++slab)
          tma_load_4d(smem_q + slab * Traits::kQSlabBytes, &q_map, 64 * slab, tile.row_begin, tile.head, tile.batch,
                      q_full);
        q_phase ^= 1u;
        for (int visit = 0; visit < tile.tiles; ++visit) {
          const int key_begin = tile.block(visit) * kTileN;
          // The stage's previous K (then V) tile has been released by every consumer warp (the
          // first pass waits for parity 1 of fresh barriers: returns at once).
          const std::uint32_t k_tile = smem_k + kv.stage * Traits::kKVBytes;
          const std::uint32_t v_tile = smem_v + kv.stage * Traits::kKVBytes;
          k_empty.wait_released(kv);
          barrier_arrive_expect_bytes(k_full[kv.stage], Traits::kKVBytes);
#pragma unroll
          for (int slab = 0; slab < kSlabs; ++slab)
            tma_load_4d(k_tile + slab * Traits::kKVSlabBytes, &k_map, 64 * slab, key_begin, tile.kv_head, tile.batch,
                        k_full[kv.stage]);
          v_empty.wait_released(kv);
          barrier_arrive_expect_bytes(v_full[kv.stage], Traits::kKVBytes);
#pragma unroll
          for (int slab = 0; slab < kSlabs; ++slab)
            tma_load_4d(v_tile + slab * Traits::kKVSlabBytes, &v_map, 64 * slab, key_begin, tile.kv_head, tile.batch,
                        v_full[kv.stage]);
          ++kv;
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
  // This warpgroup's 64 Q rows: consumer · 8 KiB into every Q slab (a multiple of the 1024-byte
  // period: TMA's 128B swizzle of the whole kTileM-row box then matches a 64-row box at that offset).
  const std::uint64_t q_descriptor =
      matrix_descriptor(smem_q + consumer * Traits::kRowsPerConsumer * Traits::kSlabRowBytes, 16, 1024);
  auto k_tile = [&](int stage) { return smem_k + stage * Traits::kKVBytes; };
  auto v_tile = [&](int stage) { return smem_v + stage * Traits::kKVBytes; };

  // v1 is a 2-consumer config only ("m192" is v2's schedule on three consumers).
  const bool serial = Traits::kConsumers == 2 && params.serial_schedule;
  // Ping-pong (v2; see the main loop): named barrier 1 + c per consumer c, sync on mine, arrive
  // on the next one's. The last consumer arrives once first so that consumer 0 starts; every
  // consumer arrives after each of its GEMM phases, the last included, so consumer 0 syncs once
  // more after its last work: every barrier then gets as many arrivals as syncs (128 + 128
  // threads each time), and none is left half-arrived at exit. (For 2 consumers the expressions
  // are v2's own: 2 - consumer.)
  constexpr int kLastConsumer = Traits::kConsumers - 1;
  const int my_barrier = 1 + consumer;
  const int next_barrier = Traits::kConsumers == 2 ? 2 - consumer : 1 + (consumer + 1) % Traits::kConsumers;
  constexpr int kPair = 2 * 128;
  if (!serial && consumer == kLastConsumer) named_barrier_arrive(1, kPair);

  std::uint32_t q_phase = 0;
  PipelineState<kStages> kv;
  for (int work = first_work; work < params.works; work += work_stride) {
    const WorkTile<Traits> tile(params, work);
    ConsumerState<Traits> state;
    state.quad_col = lane % 4;  // accumulator fragment column pair
    // This thread's rows (wgmma accumulator layout): thread_row (half 0) and thread_row + 8 (half 1).
    state.thread_row = tile.row_begin + consumer * Traits::kRowsPerConsumer + 16 * (warpgroup_thread / 32) + lane / 4;
    if (tile.tiles <= 0) {
      store_rows(params, state, tile);  // no row of the tile sees a key: O = 0, LSE = -inf
      continue;
    }
    // Tiles fully inside every row's range need no element mask.
    state.unmasked_key_begin = tile.last_row_keys.begin;
    state.unmasked_key_end = tile.first_row_keys.end;
    if constexpr (Traits::kPrecomputedKeyRanges) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const KeyRange keys = key_range(params, state.thread_row + 8 * half);
        state.key_begin_less_col[half] = keys.begin - 2 * state.quad_col;
        state.key_end_less_col[half] = keys.end - 2 * state.quad_col;
      }
    }
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) state.acc_o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kTileN / 2; ++i) state.acc_s[i] = 0.0f;
    const int tiles = tile.tiles;
    barrier_wait(q_full, q_phase);
    q_phase ^= 1u;

    if (serial) {
      // v1: one tile at a time — S, wait, softmax, P·V, wait.
      for (int visit = 0; visit < tiles; ++visit) {
        k_full.wait(kv);
        fence_registers(state.acc_s);
        wgmma_fence();
        issue_qk<Traits>(state.acc_s, q_descriptor, k_tile(kv.stage));
        wgmma_commit();
        wgmma_wait<0>();
        fence_registers(state.acc_s);
        if (visit == tiles - 1 && lane == 0) barrier_arrive(q_empty);  // this warp is done with Q
        float correction[2];
        softmax_tile(params, state, tile.block(visit), correction);
        rescale_o(state, correction);
        convert_p(state);
        v_full.wait(kv);
        fence_registers(state.acc_o);
        fence_p(state);
        wgmma_fence();
        issue_pv<Traits>(state, v_tile(kv.stage));
        wgmma_commit();
        wgmma_wait<0>();
        fence_registers(state.acc_o);
        // This warp is done with the stage (its wgmma reads of K and V have completed).
        if (lane == 0) {
          k_empty.arrive(kv);
          v_empty.arrive(kv);
        }
        ++kv;
      }
    } else {
      // v2: software-pipelined inside the warpgroup, ping-pong (round-robin) between the consumers.
      //  - Intra-warpgroup overlap: for tile j, Q·K_jᵀ and P_{j-1}·V_{j-1} are issued together;
      //    wait_group 1 returns when S_j is done, so the softmax of tile j runs while the tensor
      //    cores still do P_{j-1}·V_{j-1}; then wait_group 0, O *= correction_j, P_j = S_j rounded.
      //    Costs one more live tile of registers (P of the previous tile beside S of this one).
      //  - Ping-pong: each consumer issues its GEMMs only after the previous one in turn has
      //    issued its own (sync on my barrier, arrive on the next one's), so one consumer's GEMMs
      //    queue on the tensor cores while the other(s) run their softmax, in the order 0, 1,
      //    (2,) 0, 1, ... All consumers visit the same works and tiles, so they pass the barriers
      //    equally often: T + 1 GEMM phases each per work of T tiles.
      //    No consumer arrives twice on a barrier before its owner has synced on it: consumer c's
      //    arrival k + 1 follows c's sync k + 1, which the ring lets through only after the next
      //    consumer has passed its sync k (the arrivals go once around the ring in between).
      // The first tile: S alone.
      k_full.wait(kv);
      named_barrier_sync(my_barrier, kPair);
      fence_registers(state.acc_s);
      wgmma_fence();
      issue_qk<Traits>(state.acc_s, q_descriptor, k_tile(kv.stage));
      wgmma_commit();
      named_barrier_arrive(next_barrier, kPair);
      wgmma_wait<0>();
      fence_registers(state.acc_s);
      if (lane == 0) {
        k_empty.arrive(kv);
        if (tiles == 1) barrier_arrive(q_empty);  // this warp is done with Q
      }
      {
        float correction[2];
        softmax_tile(params, state, tile.block(0), correction);  // O is 0: nothing to rescale
      }
      convert_p(state);

      for (int visit = 1; visit < tiles; ++visit) {
        const int n_block = tile.block(visit);
        const PipelineState<kStages> previous = kv;
        ++kv;
        k_full.wait(kv);
        v_full.wait(previous);
        named_barrier_sync(my_barrier, kPair);
        fence_registers(state.acc_s);
        fence_registers(state.acc_o);
        fence_p(state);
        wgmma_fence();
        issue_qk<Traits>(state.acc_s, q_descriptor, k_tile(kv.stage));
        wgmma_commit();
        issue_pv<Traits>(state, v_tile(previous.stage));
        wgmma_commit();
        named_barrier_arrive(next_barrier, kPair);
        wgmma_wait<1>();  // S_j is in; P_{j-1}·V_{j-1} may still run
        fence_registers(state.acc_s);
        if (lane == 0) {
          k_empty.arrive(kv);                               // this warp's reads of K_j are done
          if (visit == tiles - 1) barrier_arrive(q_empty);  // ... and of Q
        }
        float correction[2];
        softmax_tile(params, state, n_block, correction);
        wgmma_wait<0>();
        fence_registers(state.acc_o);
        fence_p(state);
        // This warp's reads of V_{j-1} are done.
        if (lane == 0) v_empty.arrive(previous);
        rescale_o(state, correction);
        convert_p(state);
      }

      // The last tile's P·V.
      v_full.wait(kv);
      named_barrier_sync(my_barrier, kPair);
      fence_registers(state.acc_o);
      fence_p(state);
      wgmma_fence();
      issue_pv<Traits>(state, v_tile(kv.stage));
      wgmma_commit();
      named_barrier_arrive(next_barrier, kPair);
      wgmma_wait<0>();
      fence_registers(state.acc_o);
      if (lane == 0) v_empty.arrive(kv);
      ++kv;  // the next work starts on the next stage
    }

    store_rows(params, state, tile);
  }
  // The last consumer's final arrival on barrier 1 (see above).
  if (!serial && consumer == 0) named_barrier_sync(my_barrier, kPair);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace attnsuite::cuda::flash3
