// flash3's backward main kernel (device code only): FlashAttention-2's backward on the Hopper
// machinery of flash3's forward — TMA loads into an mbarrier ring, a producer warpgroup and two
// consumer warpgroups with setmaxnreg, asynchronous wgmma for the five products.
//
// One CTA per (key tile of 128, kv head, batch), a head's key tiles in ascending order (under a
// causal or left-window mask the first tiles are seen by the most rows: the longest CTAs start
// first), those of 4 heads interleaved (traits: the grid's order).
//  - Producer (warpgroup 0, one thread): K and V of the tile once; then, for every q head of the
//    group and every query tile that sees the keys (rows_seeing_keys), Q, dO and the tile's rows
//    of LSE·log2 e and D into a kStages-deep ring, each stage a "full" barrier (transaction
//    bytes) and an "empty" one every consumer thread arrives on.
//  - Consumers (warpgroups 1, 2: 64 keys each), per query tile of kTileM rows, each product
//    issued as soon as its operands exist, so the tensor cores run under the exponentials:
//      Sᵀ = K_c·Qᵀ, dPᵀ = V_c·dOᵀ          wgmma SS, both K-major (the forward's S = Q·Kᵀ), two groups
//      Pᵀ = 2^(Sᵀ·scale·log2 e − LSE·log2 e) once Sᵀ is done (dPᵀ still running); masked only
//                                            where the tile crosses the mask, P = 0 for rows that
//                                            see no key (their LSE·log2 e is +inf, preprocess)
//      dV += Pᵀ·dO                           wgmma RS: Pᵀ from the accumulator as A, dO read
//                                            transposed (the forward's P·V)
//      dSᵀ = Pᵀ∘(dPᵀ − D), dK += dSᵀ·Q       once dPᵀ is done (dV still running); RS as dV
//      dSᵀ → shared memory (one of two buffers), then a barrier of both consumers
//      dQ_tile = dS·K                        wgmma SS with both operands transposed over all
//                                            keys, a 64 × 64 tile each (at d64 its 64 queries of
//                                            the 128-query tile, at d128 its 64 columns:
//                                            backward_traits.cuh), added into the fp32 dQ sums
//                                            by one bulk reduction of 4 KiB a warp (add_dq_bulk)
//    and after the last tile dK·scale and dV straight to global memory.
// The preprocess (D, LSE·log2 e, the dQ sums zeroed) runs before (common/backward_row_kernels.cuh),
// the dQ conversion from the sums' fragment order after (convert_dq_tiles_kernel).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/backward_epilogue.cuh"
#include "cuda/common/backward_row_kernels.cuh"
#include "cuda/common/backward_rows.hpp"
#include "cuda/common/kernel_params.hpp"
#include "cuda/common/key_range.cuh"
#include "cuda/flash3/backward_traits.cuh"
#include "cuda/hopper/fp8_primitives.cuh"
#include "cuda/hopper/pipeline.cuh"
#include "cuda/hopper/primitives.cuh"

namespace attnsuite::cuda::flash3 {

using namespace hopper;  // the Hopper PTX wrappers (hopper/primitives.cuh)

// The query tiles a key tile is visited by, over the q heads of its kv head's group: iteration
// `it` is q head kv_head·group + it / tiles_per_head, query tile m_begin + it % tiles_per_head.
// Producer and consumers walk the same list.
template <class Traits>
struct KeyTileWork {
  int key_begin = 0, m_begin = 0, tiles_per_head = 0, iterations = 0;
  __device__ __forceinline__ KeyTileWork(const BackwardParams& params, int n_block) {
    key_begin = n_block * Traits::kTileN;
    const int key_end = min(key_begin + Traits::kTileN, params.seq_kv);
    const RowRange rows =
        rows_seeing_keys(params.seq_q, params.seq_kv, params.window_left, params.window_right, key_begin, key_end);
    m_begin = rows.begin / Traits::kTileM;
    tiles_per_head = rows.begin < rows.end ? (rows.end + Traits::kTileM - 1) / Traits::kTileM - m_begin : 0;
    iterations = tiles_per_head * params.group_size;
  }
  __device__ __forceinline__ int head(const BackwardParams& params, int kv_head, int it) const {
    return kv_head * params.group_size + it / tiles_per_head;
  }
  __device__ __forceinline__ int row_begin(int it) const { return (m_begin + it % tiles_per_head) * Traits::kTileM; }
};

// A = (rows of) K or V, B = Q or dO, both K-major: kHeadDim / 16 k-steps, 32 bytes into a 128-byte
// swizzled row each, the next 64-column slab every 4 (as the forward's issue_qk).
template <class Traits>
__device__ __forceinline__ void issue_transposed_scores(float (&acc)[Traits::kTileM / 2], std::uint32_t a_rows,
                                                        std::uint32_t b_tile) {
  const std::uint64_t a_descriptor = matrix_descriptor(a_rows, 16, 1024);
  const std::uint64_t b_descriptor = matrix_descriptor(b_tile, 16, 1024);
#pragma unroll
  for (int k_step = 0; k_step < Traits::kHeadDim / 16; ++k_step) {
    const std::uint32_t column_bytes = static_cast<std::uint32_t>((k_step % 4) * 32);
    wgmma_ss<typename Traits::Element, Traits::kTileM>(
        acc, a_descriptor + ((k_step / 4) * Traits::kKVSlabBytes + column_bytes) / 16,
        b_descriptor + ((k_step / 4) * Traits::kQSlabBytes + column_bytes) / 16, k_step > 0 ? 1 : 0);
  }
}

// acc (64 keys × kHeadDim) += A·B with A the 16-bit fragments of a 64 × kTileM accumulator (Pᵀ or
// dSᵀ) and B a Q or dO tile read transposed: k-step j takes queries 16j .. 16j+15.
template <class Traits>
__device__ __forceinline__ void issue_key_gradient(float (&acc)[Traits::kHeadDim / 2],
                                                   const std::uint32_t (&a)[Traits::kTileM / 16][4],
                                                   std::uint32_t b_tile) {
  const std::uint64_t b_descriptor = matrix_descriptor(b_tile, Traits::kQSlabBytes, 1024);
#pragma unroll
  for (int j = 0; j < Traits::kTileM / 16; ++j)
    wgmma_rs<typename Traits::Element, Traits::kHeadDim>(acc, a[j], b_descriptor + j * 16 * Traits::kSlabRowBytes / 16,
                                                         1);
}

// dQ's 64 × 64 tile of a consumer = dS (the 64 queries, keys from dSᵀ row `ds_rows` on) · K
// (64 columns, keys from K row `k_rows` on) over kKeys keys: both read transposed, k-step j takes
// keys 16j .. 16j+15.
template <class Traits, int kKeys>
__device__ __forceinline__ void issue_query_gradient(float (&acc)[32], std::uint32_t ds_rows, std::uint32_t k_rows) {
  const std::uint64_t a_descriptor = matrix_descriptor(ds_rows, Traits::kDsSlabBytes, 1024);
  const std::uint64_t b_descriptor = matrix_descriptor(k_rows, Traits::kKVSlabBytes, 1024);
#pragma unroll
  for (int j = 0; j < kKeys / 16; ++j) {
    const std::uint64_t step = static_cast<std::uint64_t>(j * 16 * Traits::kSlabRowBytes / 16);
    wgmma_ss_transposed<typename Traits::Element, 64>(acc, a_descriptor + step, b_descriptor + step, j > 0 ? 1 : 0);
  }
}

// A 64 × N accumulator as the 16-bit A fragments of N / 16 k-steps (the forward's convert_p).
template <class Element, int kN>
__device__ __forceinline__ void to_fragments(const float (&acc)[kN / 2], std::uint32_t (&fragments)[kN / 16][4]) {
#pragma unroll
  for (int j = 0; j < kN / 16; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) fragments[j][r] = pack_pair<Element>(acc[8 * j + 2 * r], acc[8 * j + 2 * r + 1]);
}

// The warp's 16 × 64 sums of dQ's tile
// stored as they lie in its registers — float4 i of lane l (rows quad_row and quad_row + 8,
// columns 8i + 2·quad_col) at staging + 16·(32i + l), each warp store 512 contiguous bytes — then
// added to the warp's 4 KiB block `sums` of the tile (the same order: convert_dq_tiles_kernel
// reads it back) by one bulk reduction from lane 0.
__device__ __forceinline__ void add_dq_bulk(const float (&acc)[32], float* sums, std::uint32_t staging) {
  int lane;
  asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
  if (lane == 0) bulk_wait_group_read<0>();  // the previous tile's reduction has read the staging area
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 8; ++i)
    asm volatile(
        "st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(staging + static_cast<std::uint32_t>(16 * (32 * i + lane))),
        "f"(acc[4 * i]), "f"(acc[4 * i + 1]), "f"(acc[4 * i + 2]), "f"(acc[4 * i + 3])
        : "memory");
  fence_proxy_async_shared();  // the generic-proxy stores, visible to the bulk reduction's reads
  __syncwarp();
  if (lane == 0) {
    bulk_reduce_add(sums, staging, 16 * 64 * 4);
    bulk_commit_group();
  }
}

// dQ = scale · the fp32 sums kept in fragment order (add_dq_bulk: per 64-row
// tile, block 4·slab + warp of 4 KiB, float4 32i + lane), 0 where the row sees no key. One CTA of 8
// warps a tile: the sums read in order (coalesced) into padded rows of shared memory, then a row a
// warp, as backward_convert_dq_kernel writes it.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(256) convert_dq_tiles_kernel(const __grid_constant__ BackwardParams params) {
  // 8 floats of padding a row: a warp's float2 stores (8 rows × 32 bytes) take two wavefronts.
  constexpr int kStride = kHeadDim + 8;
  __shared__ __align__(16) float rows[64 * kStride];
  const std::int64_t tiles = (params.seq_q + 63) / 64;
  const std::int64_t batch_head = static_cast<std::int64_t>(blockIdx.x) / tiles;
  const int row_begin = static_cast<int>(static_cast<std::int64_t>(blockIdx.x) % tiles) * 64;
  const auto* sums =
      reinterpret_cast<const float4*>(params.dq_accum + (batch_head * params.seq_q_padded + row_begin) * kHeadDim);
  for (int f = static_cast<int>(threadIdx.x); f < 16 * kHeadDim; f += 256) {
    const float4 v = sums[f];
    const int block = f / 256, i = (f / 32) % 8, lane = f % 32;
    const int row = 16 * (block % 4) + lane / 4, column = 64 * (block / 4) + 8 * i + 2 * (lane % 4);
    *reinterpret_cast<float2*>(&rows[row * kStride + column]) = make_float2(v.x, v.y);
    *reinterpret_cast<float2*>(&rows[(row + 8) * kStride + column]) = make_float2(v.z, v.w);
  }
  __syncthreads();
  const int head = static_cast<int>(batch_head % params.heads_q);
  const int batch = static_cast<int>(batch_head / params.heads_q);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int r = warp; r < 64 && row_begin + r < params.seq_q; r += 8) {
    const int row = row_begin + r;
    const KeyRange keys = key_range(params, row);
    const bool sees = keys.begin < keys.end;
    auto* dq = static_cast<Element*>(params.dq) + batch * params.dq_batch_stride + row * params.dq_row_stride +
               head * params.dq_head_stride;
    for (int c = 2 * lane; c < kHeadDim; c += 64) {
      const float2 pair = *reinterpret_cast<const float2*>(&rows[r * kStride + c]);
      *reinterpret_cast<std::uint32_t*>(dq + c) =
          pack_row_pair<Element>(sees ? pair.x * params.scale : 0.0f, sees ? pair.y * params.scale : 0.0f);
    }
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash3_backward_kernel(const __grid_constant__ BackwardParams params, const __grid_constant__ CUtensorMap q_map,
                           const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                           const __grid_constant__ CUtensorMap d_o_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim, kTileM = Traits::kTileM, kTileN = Traits::kTileN;
  constexpr int kStages = Traits::kStages, kSlabs = Traits::kSlabs;
  // The grid's order (traits): x = key tile · kHeadGroup + head in the group, y = head group.
  const int n_block = static_cast<int>(blockIdx.x) / Traits::kHeadGroup;
  const int kv_head =
      static_cast<int>(blockIdx.y) * Traits::kHeadGroup + static_cast<int>(blockIdx.x) % Traits::kHeadGroup;
  const int batch = static_cast<int>(blockIdx.z);
  if constexpr (Traits::kHeadGroup > 1)
    if (kv_head >= params.heads_kv) return;  // the last group's missing heads
  const KeyTileWork<Traits> work(params, n_block);

  extern __shared__ __align__(1024) unsigned char shared_bytes[];
  const std::uint32_t smem = (shared_address(shared_bytes) + 1023u) & ~1023u;
  const std::uint32_t smem_k = smem + Traits::kKOffset, smem_v = smem + Traits::kVOffset;
  const std::uint32_t smem_q = smem + Traits::kQOffset, smem_do = smem + Traits::kDOOffset;
  const std::uint32_t smem_ds = smem + Traits::kDsOffset, smem_stats = smem + Traits::kStatsOffset;
  // The same shared memory through a generic pointer, for the consumers' plain loads of the stats.
  const unsigned char* smem_bytes = shared_bytes + (smem - shared_address(shared_bytes));
  const std::uint32_t kv_full = smem + Traits::kBarrierOffset;
  const BarrierRing<kStages> q_full{kv_full, 1}, q_empty{kv_full, 1 + kStages};

  if (threadIdx.x == 0) {
    barrier_init(kv_full, 1);
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(q_full[stage], 1);
      barrier_init(q_empty[stage], Traits::kConsumerThreads);
    }
    barrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  if (warpgroup == 0) {
    // ---- Producer ----
    release_registers<Traits::kProducerRegisters>();
    if (threadIdx.x == 0 && work.iterations > 0) {
      barrier_arrive_expect_bytes(kv_full, 2 * Traits::kKVBytes);
#pragma unroll
      for (int slab = 0; slab < kSlabs; ++slab) {
        tma_load_4d(smem_k + slab * Traits::kKVSlabBytes, &k_map, 64 * slab, work.key_begin, kv_head, batch, kv_full);
        tma_load_4d(smem_v + slab * Traits::kKVSlabBytes, &v_map, 64 * slab, work.key_begin, kv_head, batch, kv_full);
      }
      PipelineState<kStages> stage;
      for (int it = 0; it < work.iterations; ++it) {
        const int head = work.head(params, kv_head, it), row_begin = work.row_begin(it);
        // Every consumer thread is done with the stage's previous tile (fresh barrier: returns at once).
        q_empty.wait_released(stage);
        barrier_arrive_expect_bytes(q_full[stage.stage], 2 * Traits::kQBytes + Traits::kStatsBytes);
        const std::uint32_t q_tile = smem_q + stage.stage * Traits::kQBytes;
        const std::uint32_t d_o_tile = smem_do + stage.stage * Traits::kQBytes;
#pragma unroll
        for (int slab = 0; slab < kSlabs; ++slab) {
          tma_load_4d(q_tile + slab * Traits::kQSlabBytes, &q_map, 64 * slab, row_begin, head, batch,
                      q_full[stage.stage]);
          tma_load_4d(d_o_tile + slab * Traits::kQSlabBytes, &d_o_map, 64 * slab, row_begin, head, batch,
                      q_full[stage.stage]);
        }
        // The tile's LSE·log2 e and D (the workspace's padded rows: never past its end).
        const std::int64_t rows_of_head =
            (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.seq_q_padded + row_begin;
        const std::uint32_t stats = smem_stats + stage.stage * Traits::kStatsBytes;
        bulk_load(stats, params.lse_log2 + rows_of_head, kTileM * 4, q_full[stage.stage]);
        bulk_load(stats + kTileM * 4, params.row_dot + rows_of_head, kTileM * 4, q_full[stage.stage]);
        ++stage;
      }
    }
    return;
  }

  // ---- Consumers ----
  claim_registers<Traits::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int warpgroup_thread = static_cast<int>(threadIdx.x) % 128;
  const int warp = warpgroup_thread / 32, lane = warpgroup_thread % 32;
  const int quad_row = lane / 4, quad_col = lane % 4;
  // This thread's keys: rows quad_row and quad_row + 8 of its warp's 16 in the consumer's 64.
  const int key_row = consumer * Traits::kKeysPerConsumer + 16 * warp + quad_row;
  const int thread_key = work.key_begin + key_row;

  float acc_dk[kHeadDim / 2], acc_dv[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_dk[i] = acc_dv[i] = 0.0f;

  if (work.iterations > 0) {
    barrier_wait(kv_full, 0);
    const std::uint32_t k_rows = smem_k + consumer * Traits::kKeysPerConsumer * Traits::kSlabRowBytes;
    const std::uint32_t v_rows = smem_v + consumer * Traits::kKeysPerConsumer * Traits::kSlabRowBytes;
    // The consumer's dQ product (traits) reads every key's dSᵀ: its 64 queries and all columns
    // (d64, 128-query tiles), or all queries and its 64 columns (d128).
    const int dq_column_slab = Traits::kDqByQueries ? 0 : consumer;
    const int dq_query_slab = Traits::kDqByQueries ? consumer : 0;
    const MaskBounds mask = mask_bounds(params.seq_q, params.seq_kv, params.window_left, params.window_right);

    PipelineState<kStages> stage;
    for (int it = 0; it < work.iterations; ++it) {
      const int head = work.head(params, kv_head, it), row_begin = work.row_begin(it);
      const std::uint32_t q_tile = smem_q + stage.stage * Traits::kQBytes;
      const std::uint32_t d_o_tile = smem_do + stage.stage * Traits::kQBytes;
      // This tile's dSᵀ buffer: the ring's stage (it % 2) picks it (an index of its own cost d128
      // 80 bytes of spills, ptxas sm_90a).
      const std::uint32_t ds_tile = smem_ds + stage.stage * Traits::kDsBufferBytes;
      // This thread's dSᵀ row in the buffer, chunk 0 swizzled (row % 8 = quad_row), its column pair.
      const std::uint32_t ds_row_base =
          ds_tile + static_cast<std::uint32_t>(key_row * Traits::kSlabRowBytes + quad_row * 16 + quad_col * 4);
      q_full.wait(stage);
      const float* lse_log2 =
          reinterpret_cast<const float*>(smem_bytes + Traits::kStatsOffset + stage.stage * Traits::kStatsBytes);
      const float* row_dot = lse_log2 + kTileM;

      // Sᵀ = K_c·Qᵀ and dPᵀ = V_c·dOᵀ (64 keys × kTileM queries each), two groups: P is computed
      // while dPᵀ is still in the tensor cores.
      float acc_s[kTileM / 2], acc_dp[kTileM / 2];
      wgmma_fence();
      issue_transposed_scores<Traits>(acc_s, k_rows, q_tile);
      wgmma_commit();
      issue_transposed_scores<Traits>(acc_dp, v_rows, d_o_tile);
      wgmma_commit();

      // Column 8i + 2·quad_col + e of the tile is query row_begin + that; the element mask only
      // where the tile crosses a row's key range or the ends of the keys or queries.
      const std::int64_t rows_of_head =
          (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.seq_q_padded + row_begin;
      const bool unmasked = row_begin + kTileM <= params.seq_q && work.key_begin + kTileN <= params.seq_kv &&
                            key_range(params, row_begin + kTileM - 1).begin <= work.key_begin &&
                            key_range(params, row_begin).end >= work.key_begin + kTileN;
      // kMasked: the tile crosses the mask (two copies of each loop, no per-element branch where not).
      auto hidden = [&](auto masked, int query, int half) {
        if constexpr (decltype(masked)::value) return mask.hidden(row_begin + query, thread_key + 8 * half);
        return false;
      };

      // Pᵀ = 2^(Sᵀ·scale·log2 e − LSE·log2 e) in place (0 where hidden), then dV += Pᵀ·dO issued.
      auto probabilities = [&](auto masked) {
#pragma unroll
        for (int i = 0; i < kTileM / 8; ++i) {
          const float2 lse = *reinterpret_cast<const float2*>(lse_log2 + 8 * i + 2 * quad_col);
#pragma unroll
          for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              float& s = acc_s[4 * i + 2 * half + e];
              const float p = exp2_approx(fmaf(s, params.scale_log2, -(e == 0 ? lse.x : lse.y)));
              s = hidden(masked, 8 * i + 2 * quad_col + e, half) ? 0.0f : p;
            }
        }
      };
      wgmma_wait<1>();
      fence_registers(acc_s);
      if (unmasked)
        probabilities(std::false_type{});
      else
        probabilities(std::true_type{});
      std::uint32_t p_fragments[kTileM / 16][4];
      to_fragments<Element, kTileM>(acc_s, p_fragments);
      fence_registers(acc_dv);
#pragma unroll
      for (int j = 0; j < kTileM / 16; ++j) fence_registers(p_fragments[j]);
      wgmma_fence();
      issue_key_gradient<Traits>(acc_dv, p_fragments, d_o_tile);
      wgmma_commit();

      // dSᵀ = Pᵀ∘(dPᵀ − D) in place, set to 0 where hidden (not multiplied: a NaN of V at a hidden
      // key never reaches dS), then dK += dSᵀ·Q issued. P from the fp32 scores, or (128-query
      // tiles, traits) from its 16-bit fragments: element 4i + 2·half + e is fragment [i / 2][2(i % 2) + half].
      auto probability = [&](int i, int half, int e) {
        if constexpr (Traits::kScoreGradientsFromFragments)
          return unpack_half<Element>(p_fragments[i / 2][2 * (i % 2) + half], e);
        else
          return acc_s[4 * i + 2 * half + e];
      };
      auto score_gradients = [&](auto masked) {
#pragma unroll
        for (int i = 0; i < kTileM / 8; ++i) {
          const float2 dot = *reinterpret_cast<const float2*>(row_dot + 8 * i + 2 * quad_col);
#pragma unroll
          for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              float& dp = acc_dp[4 * i + 2 * half + e];
              const float p = probability(i, half, e);
              dp = hidden(masked, 8 * i + 2 * quad_col + e, half) ? 0.0f : p * (dp - (e == 0 ? dot.x : dot.y));
            }
        }
      };
      wgmma_wait<1>();
      fence_registers(acc_dp);
      if (unmasked)
        score_gradients(std::false_type{});
      else
        score_gradients(std::true_type{});
      std::uint32_t ds_fragments[kTileM / 16][4];
      to_fragments<Element, kTileM>(acc_dp, ds_fragments);
      fence_registers(acc_dk);
#pragma unroll
      for (int j = 0; j < kTileM / 16; ++j) fence_registers(ds_fragments[j]);
      wgmma_fence();
      issue_key_gradient<Traits>(acc_dk, ds_fragments, q_tile);
      wgmma_commit();

      // dSᵀ to shared memory for dQ (while dV and dK run): row key_row, query q at slab q / 64,
      // 16-byte chunk (q % 64) / 8 XOR (row % 8) — TMA's 128B swizzle, which the transposed wgmma
      // read expects.
#pragma unroll
      for (int i = 0; i < kTileM / 8; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          // Row key_row + 8·half: the address as base XOR chunk (the row % 8 is quad_row, the buffer
          // 1024-aligned), one live register; the sum's eight loop-invariant addresses spilled 80
          // bytes at d128 once the buffer varied (ptxas sm_90a).
          const int query = 8 * i + 2 * quad_col;
          const std::uint32_t address = (ds_row_base + static_cast<std::uint32_t>((query / 64) * Traits::kDsSlabBytes +
                                                                                  8 * half * Traits::kSlabRowBytes)) ^
                                        static_cast<std::uint32_t>(((query % 64) / 8) * 16);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(ds_fragments[i / 2][2 * (i % 2) + half])
                       : "memory");
        }
      fence_proxy_async_shared();  // the generic-proxy stores, visible to wgmma's reads
      named_barrier_sync(1, Traits::kConsumerThreads);

      // dQ_tile = dS·K; then every product of the tile is done.
      float acc_dq[32];
      wgmma_fence();
      issue_query_gradient<Traits, kTileN>(acc_dq, ds_tile + dq_query_slab * Traits::kDsSlabBytes,
                                           smem_k + dq_column_slab * Traits::kKVSlabBytes);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(acc_dv);
      fence_registers(acc_dk);
      fence_registers(acc_dq);
      // This thread's reads of the stage's Q, dO and row statistics are done. Every consumer
      // thread arrives (its release orders its own reads of the stats): with one arrival a warp,
      // compute-sanitizer's racecheck reported the next bulk copy of the stats against the other
      // lanes' reads (H100, 2026-12-06).
      q_empty.arrive(stage);

      // dQ's tile into the warp's 4 KiB block of the tile's fp32 sums (slab-major: rows past seq_q
      // are the workspace's padding, never read; convert_dq_tiles_kernel).
      add_dq_bulk(acc_dq,
                  params.dq_accum + (rows_of_head + 64 * dq_query_slab) * kHeadDim + (dq_column_slab * 4 + warp) * 1024,
                  smem + Traits::dq_staging_offset(consumer, warp));
      // No second barrier: the next tile writes the other dSᵀ buffer, and the one after it stores
      // into this one only past the next tile's barrier, which every reader of this buffer
      // reaches after its dQ products are done.
      ++stage;
    }
  }

  // The staging area stays readable until this warp's last bulk reduction has read it.
  if (lane == 0) bulk_wait_group_read<0>();

  // dK (times the scale) and dV of this thread's two keys; 0 for keys that no row sees.
  auto dk_at = [&](int i, int e) { return acc_dk[4 * i + e]; };
  auto dv_at = [&](int i, int e) { return acc_dv[4 * i + e]; };
  if constexpr (Traits::kWideEpilogue)
    store_key_gradients_16_bytes<Element, kHeadDim>(params, thread_key, kv_head, batch, quad_col, dk_at, dv_at);
  else
    store_key_gradients<Element, kHeadDim>(params, thread_key, kv_head, batch, quad_col, dk_at, dv_at);
#endif
}

}  // namespace attnsuite::cuda::flash3
