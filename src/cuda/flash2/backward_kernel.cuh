// flash2's backward (device code only): FlashAttention-2's algorithm on mma.sync.
//
//   preprocess  per query row: D = rowsum(dO∘O), LSE·log2 e (+inf for a row that sees no key
//               or pads the last tile: its P is then 0), and the fp32 dQ sums zeroed.
//   main        per (key tile, kv head, batch), BackwardTraits: K and V loaded once; for every
//               q head of the group and every query tile that sees the keys:
//                 Sᵀ = K·Qᵀ,  Pᵀ = exp2(Sᵀ·scale·log2 e − LSE·log2 e),  dPᵀ = V·dOᵀ,
//                 dSᵀ = Pᵀ∘(dPᵀ − D),  dV += Pᵀ·dO,  dK += dSᵀ·Q,
//               and (atomic mode) dQ_i += dS·K added into the fp32 sums with atomics. dK, dV
//               stay in registers over the whole group (GQA: no atomics, fixed order) and are
//               written once, dK times the scale.
//   convert     atomic mode: dQ = scale · sums, rounded into dq through its strides.
//   dq          deterministic mode instead: per query tile the forward's loop over its key
//               tiles, recomputing S, P, dP, dS and accumulating dQ = scale · dS·K in registers.
// The mask (bottom-right causal, windows, the ends of the keys and queries) sets P and dS to 0
// (not multiplied: a NaN in V at a hidden key never reaches dS) in tiles that cross a mask
// boundary; rows that see no key get dQ = 0 exactly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/backward_epilogue.cuh"
#include "cuda/common/backward_row_kernels.cuh"
#include "cuda/common/backward_rows.hpp"
#include "cuda/common/key_range.cuh"
#include "cuda/flash2/backward_traits.cuh"
#include "cuda/flash2/params.hpp"
#include "cuda/sm80/primitives.cuh"
#include "cuda/sm80/tile.cuh"

namespace attnsuite::cuda::flash2 {

using namespace sm80;  // the mma.sync PTX wrappers and tile helpers

// P and dS of one m16n8 accumulator element, in place: p = 2^(s·scale·log2 e − lse_log2),
// ds = p·(dp − D); both 0 where `hidden`.
__device__ __forceinline__ void softmax_gradient(float& s_to_p, float& dp_to_ds, float scale_log2, float lse_log2,
                                                 float row_dot, bool hidden) {
  const float p = exp2_approx(fmaf(s_to_p, scale_log2, -lse_log2));
  const float ds = p * (dp_to_ds - row_dot);
  s_to_p = hidden ? 0.0f : p;
  dp_to_ds = hidden ? 0.0f : ds;
}

// Adds a thread's dQ fragment (kDTiles m16n8 accumulators) into the workspace's fp32 sums from
// `sums` (rows quad_row and quad_row + 8 kHeadDim floats apart, columns 8·dt and the next).
template <int kHeadDim, int kDTiles>
__device__ __forceinline__ void add_dq_fragment(float* sums, const float (&acc_dq)[kDTiles][4]) {
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float* pair = sums + 8 * half * kHeadDim + dt * 8;  // 8-byte aligned: an even column
#if __CUDA_ARCH__ >= 900
      // sm_90's vector reduction: one instruction for the two adjacent columns (the whole backward
      // 1.5x faster on the H100 than with the scalar pair).
      atomicAdd(reinterpret_cast<float2*>(pair), make_float2(acc_dq[dt][2 * half], acc_dq[dt][2 * half + 1]));
#else
      atomicAdd(pair, acc_dq[dt][2 * half]);
      atomicAdd(pair + 1, acc_dq[dt][2 * half + 1]);
#endif
    }
}

// The query tiles (of kTileM rows) of each q head that see any key of [key_begin, key_end): the
// first, and how many (0 when none).
struct QueryTiles {
  int first, count;
};
template <int kTileM>
__device__ __forceinline__ QueryTiles query_tiles_seeing(const BackwardParams& params, int key_begin, int key_end) {
  const RowRange rows =
      rows_seeing_keys(params.seq_q, params.seq_kv, params.window_left, params.window_right, key_begin, key_end);
  const int first = rows.begin / kTileM;
  return {first, rows.begin < rows.end ? (rows.end + kTileM - 1) / kTileM - first : 0};
}

// Issues the cp.async copies of a CTA's K and V rows key_begin.. (kTileN of each) of (batch, kv head).
template <int kTileN, int kRowBytes, int kThreads>
__device__ __forceinline__ void load_key_tile_async(const BackwardParams& params, int batch, int kv_head, int key_begin,
                                                    std::uint32_t smem_k, std::uint32_t smem_v) {
  const char* k_tile_rows =
      static_cast<const char*>(params.k) + 2 * (batch * params.k_batch_stride + kv_head * params.k_head_stride +
                                                static_cast<std::int64_t>(key_begin) * params.k_row_stride);
  const char* v_tile_rows =
      static_cast<const char*>(params.v) + 2 * (batch * params.v_batch_stride + kv_head * params.v_head_stride +
                                                static_cast<std::int64_t>(key_begin) * params.v_row_stride);
  load_rows_async<kTileN, kRowBytes, kThreads>(smem_k, k_tile_rows, 2 * params.k_row_stride, params.seq_kv - key_begin,
                                               params.k);
  load_rows_async<kTileN, kRowBytes, kThreads>(smem_v, v_tile_rows, 2 * params.v_row_stride, params.seq_kv - key_begin,
                                               params.v);
}

// A main kernel's CTA (grid: key tiles, kv heads, batches; early key tiles first, the most rows
// when causal): its kTileN keys, the query tiles of kTileM rows of each q head of the group that
// see them (`iterations` in all), and the thread's place in its warp.
template <int kTileM, int kTileN>
struct KeyTileCta {
  int kv_head, batch, key_begin, key_end;
  int m_begin, tiles_per_head, iterations;
  int warp, lane, quad_row, quad_col;

  __device__ __forceinline__ explicit KeyTileCta(const BackwardParams& params) {
    const int n_block = static_cast<int>(blockIdx.x);
    kv_head = static_cast<int>(blockIdx.y);
    batch = static_cast<int>(blockIdx.z);
    warp = static_cast<int>(threadIdx.x) / 32;
    lane = static_cast<int>(threadIdx.x) % 32;
    quad_row = lane / 4;
    quad_col = lane % 4;
    key_begin = n_block * kTileN;
    key_end = min(key_begin + kTileN, params.seq_kv);
    const QueryTiles tiles = query_tiles_seeing<kTileM>(params, key_begin, key_end);
    m_begin = tiles.first;
    tiles_per_head = tiles.count;
    iterations = tiles_per_head * params.group_size;
  }
};

// The main kernel (see the top of the file). kAtomicDq: add dS·K into params.dq_accum; without,
// dQ is left to flash2_backward_dq_kernel.
template <class Traits, bool kAtomicDq>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    flash2_backward_kernel(const __grid_constant__ BackwardParams params) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim, kRowBytes = Traits::kRowBytes;
  constexpr int kTileM = Traits::kTileM, kTileN = Traits::kTileN, kThreads = Traits::kThreads;
  constexpr int kQueryTiles = Traits::kQueryTiles, kDTiles = Traits::kDTiles, kKSteps = Traits::kKSteps;
  constexpr int kKVRegisterTiles = Traits::kKVInRegisters ? 1 : 0;

  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const std::uint32_t smem = shared_address(shared_bytes);
  const std::uint32_t smem_k = smem + Traits::kKOffset, smem_v = smem + Traits::kVOffset;
  const std::uint32_t smem_q = smem + Traits::kQOffset, smem_do = smem + Traits::kDOOffset;
  const std::uint32_t smem_ds = smem + Traits::kDsOffset;
  float* smem_lse = reinterpret_cast<float*>(shared_bytes + Traits::kLseOffset);  // 2 stages × kTileM
  float* smem_dot = reinterpret_cast<float*>(shared_bytes + Traits::kDotOffset);

  const KeyTileCta<kTileM, kTileN> cta(params);
  const int kv_head = cta.kv_head, batch = cta.batch, key_begin = cta.key_begin;
  const int warp = cta.warp, lane = cta.lane, quad_row = cta.quad_row, quad_col = cta.quad_col;
  const int m_begin = cta.m_begin, tiles_per_head = cta.tiles_per_head, iterations = cta.iterations;
  load_key_tile_async<kTileN, kRowBytes, kThreads>(params, batch, kv_head, key_begin, smem_k, smem_v);

  // Iteration `it` visits q head kv_head·group + it / tiles_per_head, query tile
  // m_begin + it % tiles_per_head, from stage it % 2.
  auto head_of = [&](int it) { return kv_head * params.group_size + it / tiles_per_head; };
  auto row_begin_of = [&](int it) { return (m_begin + it % tiles_per_head) * kTileM; };
  auto load_query_tile = [&](int it) {
    const int stage = it % 2, head = head_of(it), row_begin = row_begin_of(it);
    const char* q_rows =
        static_cast<const char*>(params.q) + 2 * (batch * params.q_batch_stride + head * params.q_head_stride +
                                                  static_cast<std::int64_t>(row_begin) * params.q_row_stride);
    const char* d_o_rows =
        static_cast<const char*>(params.d_o) + 2 * (batch * params.d_o_batch_stride + head * params.d_o_head_stride +
                                                    static_cast<std::int64_t>(row_begin) * params.d_o_row_stride);
    load_rows_async<kTileM, kRowBytes, kThreads>(smem_q + stage * Traits::kQTileBytes, q_rows, 2 * params.q_row_stride,
                                                 params.seq_q - row_begin, params.q);
    load_rows_async<kTileM, kRowBytes, kThreads>(smem_do + stage * Traits::kQTileBytes, d_o_rows,
                                                 2 * params.d_o_row_stride, params.seq_q - row_begin, params.d_o);
    // LSE·log2 e and D of the tile's rows: the workspace holds every padded row.
    constexpr int kFloatChunks = kTileM / 4;
    const int thread = static_cast<int>(threadIdx.x);
    if (thread < 2 * kFloatChunks) {
      const bool dot = thread >= kFloatChunks;
      const int chunk = thread % kFloatChunks;
      const std::int64_t first =
          (static_cast<std::int64_t>(batch) * params.heads_q + head) * params.seq_q_padded + row_begin + 4 * chunk;
      float* dst = (dot ? smem_dot : smem_lse) + stage * kTileM + 4 * chunk;
      copy_16_bytes_async(shared_address(dst), (dot ? params.row_dot : params.lse_log2) + first, true);
    }
  };
  if (iterations > 0) load_query_tile(0);
  commit_async_copies();

  // ldmatrix lane patterns (see flash2's forward): "a" for A operands and for B operands read
  // transposed, "b" for B operands read as stored and for A operands read transposed.
  const int a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_chunk = lane / 16;
  const int b_row = (lane % 8) + 8 * (lane / 16), b_chunk = (lane / 8) % 2;
  const FragmentAddresses<kRowBytes> a_addresses(a_row, a_chunk);
  const FragmentAddresses<kRowBytes> b_addresses(b_row, b_chunk);
  const std::uint32_t warp_k = smem_k + warp * 16 * kRowBytes, warp_v = smem_v + warp * 16 * kRowBytes;

  std::uint32_t k_frag[1][kKVRegisterTiles > 0 ? kKSteps : 1][4];
  std::uint32_t v_frag[1][kKVRegisterTiles > 0 ? kKSteps : 1][4];
  if constexpr (kKVRegisterTiles > 0) {
    wait_async_copies<0>();
    __syncthreads();
    load_q_fragments<1, kKSteps>(k_frag, a_addresses, warp_k);
    load_q_fragments<1, kKSteps>(v_frag, a_addresses, warp_v);
  }

  float acc_dk[1][kDTiles][4], acc_dv[1][kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[0][dt][e] = acc_dv[0][dt][e] = 0.0f;

  const Mma16x8x16<Element> mma{};
  // dQ's tile of this warp (atomic mode): rows row_block·16.., columns of its column group,
  // whose K columns (B of dS·K) start kDqDTiles / 2 16-column steps per group in.
  const int row_block = warp % Traits::kDqRowBlocks, column_group = warp / Traits::kDqRowBlocks;
  const FragmentAddresses<kRowBytes> dq_k_addresses(a_row, a_chunk, column_group * (Traits::kDqDTiles / 2));
  // This thread's keys: rows quad_row and quad_row + 8 of the warp's 16.
  const int warp_key = key_begin + warp * 16 + quad_row;
  const MaskBounds mask = mask_bounds(params.seq_q, params.seq_kv, params.window_left, params.window_right);

  for (int it = 0; it < iterations; ++it) {
    wait_async_copies<0>();
    __syncthreads();  // tile `it` visible to all; the other stage and dSᵀ are free
    if (it + 1 < iterations) load_query_tile(it + 1);
    commit_async_copies();
    const int stage = it % 2, head = head_of(it), row_begin = row_begin_of(it);
    const std::uint32_t q_tile = smem_q + stage * Traits::kQTileBytes;
    const std::uint32_t d_o_tile = smem_do + stage * Traits::kQTileBytes;
    const float* lse_log2 = smem_lse + stage * kTileM;
    const float* row_dot = smem_dot + stage * kTileM;

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: this warp's 16 keys × the tile's kTileM queries.
    float acc_s[1][kQueryTiles][4], acc_dp[1][kQueryTiles][4];
    multiply_qk<kKVRegisterTiles, kKSteps>(acc_s, k_frag, a_addresses, warp_k, b_addresses, q_tile, mma);
    multiply_qk<kKVRegisterTiles, kKSteps>(acc_dp, v_frag, a_addresses, warp_v, b_addresses, d_o_tile, mma);

    // Pᵀ and dSᵀ; the mask only where the tile crosses a row's key range or the ends.
    const bool unmasked = row_begin + kTileM <= params.seq_q &&
                          key_range(params, row_begin + kTileM - 1).begin <= key_begin &&
                          key_range(params, row_begin).end >= key_begin + kTileN;
#pragma unroll
    for (int nt = 0; nt < kQueryTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int query = nt * 8 + 2 * quad_col + e;
#pragma unroll
        for (int half = 0; half < 2; ++half)
          softmax_gradient(acc_s[0][nt][2 * half + e], acc_dp[0][nt][2 * half + e], params.scale_log2, lse_log2[query],
                           row_dot[query], !unmasked && mask.hidden(row_begin + query, warp_key + 8 * half));
      }

    // dV += Pᵀ·dO and dK += dSᵀ·Q, P and dS rounded to the 16-bit type (dO and Q read transposed).
    accumulate_pv<Element>(acc_dv, acc_s, a_addresses, d_o_tile);
    accumulate_pv<Element>(acc_dk, acc_dp, a_addresses, q_tile);

    if constexpr (kAtomicDq) {
      // dSᵀ to shared memory (the warp's 16 key rows), then dQ = dS·K over all kTileN keys.
#pragma unroll
      for (int nt = 0; nt < kQueryTiles; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int key_row = warp * 16 + quad_row + 8 * half;
          *reinterpret_cast<std::uint32_t*>(shared_bytes + Traits::kDsOffset +
                                            swizzled_byte_offset<Traits::kDsRowBytes>(key_row, nt) + 4 * quad_col) =
              pack_pair<Element>(acc_dp[0][nt][2 * half], acc_dp[0][nt][2 * half + 1]);
        }
      __syncthreads();
      const FragmentAddresses<Traits::kDsRowBytes> ds_addresses(b_row, b_chunk);
      constexpr int kDqDTiles = Traits::kDqDTiles;
      float acc_dq[kDqDTiles][4];
#pragma unroll
      for (int dt = 0; dt < kDqDTiles; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_dq[dt][e] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < Traits::kKeySteps; ++ks) {
        std::uint32_t a[4];  // dS rows row_block·16.., keys ks·16..: dSᵀ read transposed
        load_matrix_x4_transposed(a, ds_addresses.at(smem_ds, ks, row_block));
#pragma unroll
        for (int dp = 0; dp < kDqDTiles / 2; ++dp) {
          std::uint32_t b[4];  // K rows ks·16.. (the k dim), columns read transposed
          load_matrix_x4_transposed(b, dq_k_addresses.at(smem_k, ks, dp));
          mma(acc_dq[2 * dp], a, b[0], b[1]);
          mma(acc_dq[2 * dp + 1], a, b[2], b[3]);
        }
      }
      float* sums = params.dq_accum +
                    ((static_cast<std::int64_t>(batch) * params.heads_q + head) * params.seq_q_padded + row_begin +
                     row_block * 16 + quad_row) *
                        kHeadDim +
                    column_group * kDqDTiles * 8 + 2 * quad_col;
      add_dq_fragment<kHeadDim>(sums, acc_dq);
    }
  }
  wait_async_copies<0>();  // with no query tile, K and V may still be in flight

  // dK (times the scale) and dV of this thread's two keys.
  store_key_gradients<Element, kHeadDim>(
      params, warp_key, kv_head, batch, quad_col, [&](int dt, int e) { return acc_dk[0][dt][e]; },
      [&](int dt, int e) { return acc_dv[0][dt][e]; });
}

// The deterministic mode's dQ (see the top of the file): one CTA per (query tile, q head, batch).
template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    flash2_backward_dq_kernel(const __grid_constant__ BackwardParams params) {
  using Element = typename Traits::Element;
  constexpr int kRowBytes = Traits::kRowBytes, kThreads = Traits::kThreads;
  constexpr int kTileM = Traits::kTileM, kTileN = Traits::kTileN, kStages = Traits::kStages;
  constexpr int kNTiles = Traits::kNTiles, kDTiles = Traits::kDTiles, kKSteps = Traits::kKSteps;

  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const std::uint32_t smem = shared_address(shared_bytes);
  const std::uint32_t smem_q = smem + Traits::kQOffset, smem_do = smem + Traits::kDOOffset;
  const std::uint32_t smem_k = smem + Traits::kKOffset, smem_v = smem + Traits::kVOffset;

  // Heavy (late, causal) query tiles first, as in the forward.
  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int kv_head = head / params.group_size;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int quad_row = lane / 4, quad_col = lane % 4;
  const int row_begin = m_block * kTileM;
  const int row_last = min(row_begin + kTileM, params.seq_q) - 1;

  const KeyRange first_row_keys = key_range(params, row_begin);
  const KeyRange last_row_keys = key_range(params, row_last);
  const int n_block_min = first_row_keys.begin / kTileN;
  const int n_block_max =
      last_row_keys.end <= first_row_keys.begin ? n_block_min : (last_row_keys.end + kTileN - 1) / kTileN;
  const int unmasked_key_begin = last_row_keys.begin, unmasked_key_end = first_row_keys.end;

  const std::int64_t batch_head = static_cast<std::int64_t>(batch) * params.heads_q + head;
  const char* q_rows =
      static_cast<const char*>(params.q) + 2 * (batch * params.q_batch_stride + head * params.q_head_stride +
                                                static_cast<std::int64_t>(row_begin) * params.q_row_stride);
  const char* d_o_rows =
      static_cast<const char*>(params.d_o) + 2 * (batch * params.d_o_batch_stride + head * params.d_o_head_stride +
                                                  static_cast<std::int64_t>(row_begin) * params.d_o_row_stride);
  const char* k_head =
      static_cast<const char*>(params.k) + 2 * (batch * params.k_batch_stride + kv_head * params.k_head_stride);
  const char* v_head =
      static_cast<const char*>(params.v) + 2 * (batch * params.v_batch_stride + kv_head * params.v_head_stride);
  auto load_kv_tile = [&](int n_block) {
    const int stage = (n_block - n_block_min) % kStages, key_begin = n_block * kTileN;
    load_rows_async<kTileN, kRowBytes, kThreads>(
        smem_k + stage * Traits::kKVTileBytes, k_head + 2 * static_cast<std::int64_t>(key_begin) * params.k_row_stride,
        2 * params.k_row_stride, params.seq_kv - key_begin, params.k);
    load_rows_async<kTileN, kRowBytes, kThreads>(
        smem_v + stage * Traits::kKVTileBytes, v_head + 2 * static_cast<std::int64_t>(key_begin) * params.v_row_stride,
        2 * params.v_row_stride, params.seq_kv - key_begin, params.v);
  };

  // Prologue: Q and dO, then the first kStages - 1 K/V tiles, one commit group each.
  load_rows_async<kTileM, kRowBytes, kThreads>(smem_q, q_rows, 2 * params.q_row_stride, params.seq_q - row_begin,
                                               params.q);
  load_rows_async<kTileM, kRowBytes, kThreads>(smem_do, d_o_rows, 2 * params.d_o_row_stride, params.seq_q - row_begin,
                                               params.d_o);
  commit_async_copies();
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (n_block_min + stage < n_block_max) load_kv_tile(n_block_min + stage);
    commit_async_copies();
  }

  // This thread's two rows (quad_row and quad_row + 8 of the warp's 16): LSE·log2 e, D, keys.
  float lse_log2[2], row_dot[2];
  KeyRange keys[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row_begin + warp * 16 + quad_row + 8 * half;
    lse_log2[half] = params.lse_log2[batch_head * params.seq_q_padded + row];
    row_dot[half] = params.row_dot[batch_head * params.seq_q_padded + row];
    keys[half] = key_range(params, row);
  }

  const int a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_chunk = lane / 16;
  const int b_row = (lane % 8) + 8 * (lane / 16), b_chunk = (lane / 8) % 2;
  const FragmentAddresses<kRowBytes> a_addresses(a_row, a_chunk);
  const FragmentAddresses<kRowBytes> b_addresses(b_row, b_chunk);
  const std::uint32_t warp_q = smem_q + warp * 16 * kRowBytes, warp_do = smem_do + warp * 16 * kRowBytes;
  const std::uint32_t no_fragments[1][1][4] = {};
  const Mma16x8x16<Element> mma{};

  float acc_dq[1][kDTiles][4];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dq[0][dt][e] = 0.0f;

  for (int n_block = n_block_min; n_block < n_block_max; ++n_block) {
    wait_async_copies<kStages - 2>();
    __syncthreads();  // tile n_block visible to all; the stage computed last iteration is free
    if (n_block + kStages - 1 < n_block_max) load_kv_tile(n_block + kStages - 1);
    commit_async_copies();
    const int stage = (n_block - n_block_min) % kStages;
    const std::uint32_t k_tile = smem_k + stage * Traits::kKVTileBytes;
    const std::uint32_t v_tile = smem_v + stage * Traits::kKVTileBytes;

    float acc_s[1][kNTiles][4], acc_dp[1][kNTiles][4];
    multiply_qk<0, kKSteps>(acc_s, no_fragments, a_addresses, warp_q, b_addresses, k_tile, mma);
    multiply_qk<0, kKSteps>(acc_dp, no_fragments, a_addresses, warp_do, b_addresses, v_tile, mma);

    const int key_begin = n_block * kTileN;
    const bool masked = key_begin < unmasked_key_begin || key_begin + kTileN > unmasked_key_end;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key_begin + nt * 8 + 2 * quad_col + e;
          const bool hidden = masked && (key < keys[half].begin || key >= keys[half].end);
          softmax_gradient(acc_s[0][nt][2 * half + e], acc_dp[0][nt][2 * half + e], params.scale_log2, lse_log2[half],
                           row_dot[half], hidden);
        }
    // dQ += dS·K (dS rounded to the 16-bit type; K read transposed).
    accumulate_pv<Element>(acc_dq, acc_dp, a_addresses, k_tile);
  }
  wait_async_copies<0>();

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row_begin + warp * 16 + quad_row + 8 * half;
    if (row >= params.seq_q) continue;
    const bool sees = keys[half].begin < keys[half].end;
    auto* dq = static_cast<Element*>(params.dq) + batch * params.dq_batch_stride +
               static_cast<std::int64_t>(row) * params.dq_row_stride + head * params.dq_head_stride + 2 * quad_col;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
      *reinterpret_cast<std::uint32_t*>(dq + dt * 8) =
          pack_pair<Element>(sees ? acc_dq[0][dt][2 * half] * params.scale : 0.0f,
                             sees ? acc_dq[0][dt][2 * half + 1] * params.scale : 0.0f);
  }
}

}  // namespace attnsuite::cuda::flash2
