// flash2's tiled backward main kernel (device code only; backward_split=tiles, experimental):
// FlashAttention-2's split of the five products among 8 warps (TiledBackwardTraits). Per CTA
// (128-key tile, kv head, batch), K and V loaded once; per query tile of every q head of the
// group that sees the keys:
//
//   S = Q·Kᵀ, dP = dO·Vᵀ            warps 2 × 4 over (queries, keys), operands from shared memory
//   P = exp2(S·scale·log2 e − LSE·log2 e),  dS = P∘(dP − D)     in the accumulators, masked
//   P, dS → shared memory            one barrier
//   dV += Pᵀ·dO,  dK += dSᵀ·Q         warps 4 × 2 over (keys, columns), kept in registers
//   dQ_i += dS·K                     warps 2 × 4 over (queries, columns), fp32 atomics
//
// The preprocess, the dQ conversion and the deterministic dQ kernel are the key-row kernel's
// (backward_kernel.cuh); so are the mask rule and the workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/backward_epilogue.cuh"
#include "cuda/common/backward_rows.hpp"
#include "cuda/common/key_range.cuh"
#include "cuda/flash2/backward_kernel.cuh"
#include "cuda/flash2/backward_traits.cuh"
#include "cuda/sm80/primitives.cuh"
#include "cuda/sm80/tile.cuh"

namespace attnsuite::cuda::flash2 {

// acc[mt][dt] += A·B over kKSteps k-steps, both operands read transposed from shared memory: A's
// rows (m) are the columns of the stored tile at a_tile (a_addresses: k-step as its 16-row block,
// m tile as its step), B's columns (n) those of the tile at b_tile (b_addresses: k-step as its
// row block, 16-column pair as its step) — Pᵀ·dO and dSᵀ·Q with P, dS stored by query rows.
template <class Element, int kKSteps, int kMTiles, int kDTiles, class AAddresses, class BAddresses>
__device__ __forceinline__ void accumulate_transposed(float (&acc)[kMTiles][kDTiles][4], const AAddresses& a_addresses,
                                                      std::uint32_t a_tile, const BAddresses& b_addresses,
                                                      std::uint32_t b_tile) {
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    std::uint32_t a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) load_matrix_x4_transposed(a[mt], a_addresses.at(a_tile, ks, mt));
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      std::uint32_t b[4];
      load_matrix_x4_transposed(b, b_addresses.at(b_tile, ks, dp));
      multiply_b_pair(acc, dp, a, b, Mma16x8x16<Element>{});
    }
  }
}

// The cp.async copies of a query tile: kTileM rows of Q and dO of one (batch, head) into their
// swizzled tiles, and the rows' LSE·log2 e and D (the workspace holds every padded row). What
// does not change between tiles — a thread's rows and chunk, its swizzled shared offsets, its
// byte offsets into Q and dO — is computed once here: through load_rows_async per tile, the
// addresses took ~280 of the ~1,350 instructions of a d128 query tile (sm_90a SASS).
template <int kTileM, int kRowBytes, int kThreads>
struct QueryTileLoader {
  static constexpr int kChunks = kRowBytes / 16;
  static constexpr int kRowStep = kThreads / kChunks;  // rows between a thread's copies
  static constexpr int kCopies = kTileM / kRowStep;
  static constexpr int kFloatChunks = kTileM / 4;
  static_assert(kThreads % kChunks == 0 && kTileM % kRowStep == 0 && kRowStep % 8 == 0,
                "whole rows per pass, and a swizzle phase that repeats every pass");

  const BackwardParams& params;
  const char* q_batch;
  const char* d_o_batch;
  std::int64_t row_stats_batch;       // the batch's first row in the LSE and D rows of the workspace
  std::int64_t q_thread, d_o_thread;  // bytes from a tile's first row to this thread's first copy
  std::int64_t q_step, d_o_step;      // bytes between its copies
  std::uint32_t smem_offset;
  int first_row;

  __device__ __forceinline__ QueryTileLoader(const BackwardParams& p, int batch) : params(p) {
    const int thread = static_cast<int>(threadIdx.x), chunk = thread % kChunks;
    first_row = thread / kChunks;
    smem_offset = static_cast<std::uint32_t>(swizzled_byte_offset<kRowBytes>(first_row, chunk));
    q_batch = static_cast<const char*>(p.q) + 2 * batch * p.q_batch_stride;
    d_o_batch = static_cast<const char*>(p.d_o) + 2 * batch * p.d_o_batch_stride;
    row_stats_batch = static_cast<std::int64_t>(batch) * p.heads_q * p.seq_q_padded;
    q_thread = 2 * first_row * p.q_row_stride + 16 * chunk;
    d_o_thread = 2 * first_row * p.d_o_row_stride + 16 * chunk;
    q_step = 2 * static_cast<std::int64_t>(kRowStep) * p.q_row_stride;
    d_o_step = 2 * static_cast<std::int64_t>(kRowStep) * p.d_o_row_stride;
  }

  __device__ __forceinline__ void load(int head, int row_begin, std::uint32_t q_tile, std::uint32_t d_o_tile,
                                       float* lse, float* dot) const {
    const char* q_rows =
        q_batch + 2 * (head * params.q_head_stride + static_cast<std::int64_t>(row_begin) * params.q_row_stride) +
        q_thread;
    const char* d_o_rows =
        d_o_batch + 2 * (head * params.d_o_head_stride + static_cast<std::int64_t>(row_begin) * params.d_o_row_stride) +
        d_o_thread;
    const int valid_rows = params.seq_q - row_begin - first_row;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const bool valid = i * kRowStep < valid_rows;
      const std::uint32_t offset = smem_offset + i * kRowStep * kRowBytes;
      copy_16_bytes_async(q_tile + offset, valid ? static_cast<const void*>(q_rows + i * q_step) : params.q, valid);
      copy_16_bytes_async(d_o_tile + offset, valid ? static_cast<const void*>(d_o_rows + i * d_o_step) : params.d_o,
                          valid);
    }
    const int thread = static_cast<int>(threadIdx.x);
    if (thread < 2 * kFloatChunks) {
      const bool is_dot = thread >= kFloatChunks;
      const int chunk = thread % kFloatChunks;
      const std::int64_t first =
          row_stats_batch + static_cast<std::int64_t>(head) * params.seq_q_padded + row_begin + 4 * chunk;
      float* dst = (is_dot ? dot : lse) + 4 * chunk;
      copy_16_bytes_async(shared_address(dst), (is_dot ? params.row_dot : params.lse_log2) + first, true);
    }
  }
};

template <class Traits, bool kAtomicDq>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    flash2_backward_tiles_kernel(const __grid_constant__ BackwardParams params) {
  using Element = typename Traits::Element;
  constexpr int kHeadDim = Traits::kHeadDim, kRowBytes = Traits::kRowBytes, kPRowBytes = Traits::kPRowBytes;
  constexpr int kTileM = Traits::kTileM, kTileN = Traits::kTileN, kThreads = Traits::kThreads;
  constexpr int kSMTiles = Traits::kSMTiles, kSNTiles = Traits::kSNTiles;
  constexpr int kKVMTiles = Traits::kKVMTiles, kKVDTiles = Traits::kKVDTiles;
  constexpr int kDqMTiles = Traits::kDqMTiles, kDqDTiles = Traits::kDqDTiles;

  // This CTA's 128 keys (one kv head, one batch) and the query tiles that see them.
  const KeyTileCta<kTileM, kTileN> cta(params);
  const int kv_head = cta.kv_head, batch = cta.batch, key_begin = cta.key_begin;
  const int warp = cta.warp, lane = cta.lane, quad_row = cta.quad_row, quad_col = cta.quad_col;
  const int m_begin = cta.m_begin, tiles_per_head = cta.tiles_per_head, iterations = cta.iterations;

  // Shared memory: K, V; two stages of Q, dO, LSE·log2 e and D; P and dS.
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const std::uint32_t smem = shared_address(shared_bytes);
  const std::uint32_t smem_k = smem + Traits::kKOffset, smem_v = smem + Traits::kVOffset;
  const std::uint32_t smem_q = smem + Traits::kQOffset, smem_do = smem + Traits::kDOOffset;
  const std::uint32_t smem_p = smem + Traits::kPOffset, smem_ds = smem + Traits::kDsOffset;
  float* smem_lse = reinterpret_cast<float*>(shared_bytes + Traits::kLseOffset);
  float* smem_dot = reinterpret_cast<float*>(shared_bytes + Traits::kDotOffset);
  load_key_tile_async<kTileN, kRowBytes, kThreads>(params, batch, kv_head, key_begin, smem_k, smem_v);

  // Iteration `it` visits query tile m_begin + it % tiles_per_head of q head kv_head·group +
  // it / tiles_per_head, from stage it % 2; (load_head, load_m) is the next tile to load and
  // (head, m) the one computed, both advanced by `next` (no division per tile).
  const int m_end = m_begin + tiles_per_head;
  auto next = [&](int& tile_head, int& m) {
    if (++m == m_end) {
      m = m_begin;
      ++tile_head;
    }
  };
  const QueryTileLoader<kTileM, kRowBytes, kThreads> loader(params, batch);
  int load_head = kv_head * params.group_size, load_m = m_begin;
  auto load_query_tile = [&](int stage) {
    loader.load(load_head, load_m * kTileM, smem_q + stage * Traits::kQTileBytes, smem_do + stage * Traits::kQTileBytes,
                smem_lse + stage * kTileM, smem_dot + stage * kTileM);
    next(load_head, load_m);
  };
  if (iterations > 0) load_query_tile(0);
  commit_async_copies();

  // ldmatrix lane patterns (flash2's forward): "a" for A operands and for B operands read
  // transposed, "b" for B operands read as stored and for A operands read transposed.
  const int a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_chunk = lane / 16;
  const int b_row = (lane % 8) + 8 * (lane / 16), b_chunk = (lane / 8) % 2;

  // S and dP: this warp's rows s_row.. of the query tile and keys s_key.. of the key tile.
  const int s_row = (warp % 2) * Traits::kSRows, s_key = (warp / 2) * Traits::kSKeys;
  const FragmentAddresses<kRowBytes> a_addresses(a_row, a_chunk);
  const FragmentAddresses<kRowBytes> b_addresses(b_row, b_chunk);
#if __CUDA_ARCH__ >= 900
  const FragmentAddresses<kPRowBytes> ps_addresses(a_row, a_chunk, s_key / 16);  // P's, dS's stores
#endif
  // dK and dV: keys kv_key.. and columns kv_column..; Pᵀ's and dSᵀ's m tiles are 16-key steps of
  // the P tile's rows, dO's and Q's 16-column pairs steps of theirs (both from the warp's place).
  const int kv_key = (warp % 4) * Traits::kKVKeys, kv_column = (warp / 4) * Traits::kKVColumns;
  const FragmentAddresses<kPRowBytes> pt_addresses(b_row, b_chunk, kv_key / 16);
  const FragmentAddresses<kRowBytes> kv_b_addresses(a_row, a_chunk, kv_column / 16);
  // dQ: rows dq_row.. and columns dq_column.. (K's columns from the warp's place).
  const int dq_row = (warp % 2) * Traits::kDqRows, dq_column = (warp / 2) * Traits::kDqColumns;
  const FragmentAddresses<kPRowBytes> ds_addresses(a_row, a_chunk);
  const FragmentAddresses<kRowBytes> dq_k_addresses(a_row, a_chunk, dq_column / 16);

  float acc_dk[kKVMTiles][kKVDTiles][4], acc_dv[kKVMTiles][kKVDTiles][4];
  clear_accumulators(acc_dk);
  clear_accumulators(acc_dv);

  const Mma16x8x16<Element> mma{};
  const std::uint32_t no_fragments[1][1][4] = {};
  const MaskBounds mask = mask_bounds(params.seq_q, params.seq_kv, params.window_left, params.window_right);

  int head = kv_head * params.group_size, m = m_begin;
  for (int it = 0; it < iterations; ++it, next(head, m)) {
    wait_async_copies<0>();
    __syncthreads();  // tile `it` visible to all; the other stage, P and dS are free
    const int stage = it & 1, row_begin = m * kTileM;
    if (it + 1 < iterations) load_query_tile(stage ^ 1);
    commit_async_copies();
    const std::uint32_t q_tile = smem_q + stage * Traits::kQTileBytes;
    const std::uint32_t d_o_tile = smem_do + stage * Traits::kQTileBytes;
    const float* lse_log2 = smem_lse + stage * kTileM;
    const float* row_dot = smem_dot + stage * kTileM;

    // S = Q·Kᵀ and dP = dO·Vᵀ of this warp's rows and keys.
    float acc_s[kSMTiles][kSNTiles][4], acc_dp[kSMTiles][kSNTiles][4];
    multiply_qk<0, Traits::kKSteps>(acc_s, no_fragments, a_addresses, q_tile + s_row * kRowBytes, b_addresses,
                                    smem_k + s_key * kRowBytes, mma);
    multiply_qk<0, Traits::kKSteps>(acc_dp, no_fragments, a_addresses, d_o_tile + s_row * kRowBytes, b_addresses,
                                    smem_v + s_key * kRowBytes, mma);

    // P and dS; the mask only where the tile crosses a row's key range or the ends, in its own copy
    // of the loop (the key-row kernel's single loop with `!unmasked && hidden` per element executes
    // the mask's compares and selects everywhere: ~270 of its ~1,250 instructions a tile at d128).
    const bool unmasked = row_begin + kTileM <= params.seq_q &&
                          key_range(params, row_begin + kTileM - 1).begin <= key_begin &&
                          key_range(params, row_begin).end >= key_begin + kTileN;
    auto softmax_gradients = [&](auto masked) {
#pragma unroll
      for (int mt = 0; mt < kSMTiles; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = s_row + mt * 16 + quad_row + 8 * half;
          const float row_lse = lse_log2[row], dot = row_dot[row];
#pragma unroll
          for (int nt = 0; nt < kSNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = key_begin + s_key + nt * 8 + 2 * quad_col + e;
              softmax_gradient(acc_s[mt][nt][2 * half + e], acc_dp[mt][nt][2 * half + e], params.scale_log2, row_lse,
                               dot, decltype(masked)::value && mask.hidden(row_begin + row, key));
            }
        }
    };
    if (unmasked)
      softmax_gradients(std::false_type{});
    else
      softmax_gradients(std::true_type{});

      // P and dS to shared memory, rounded to the 16-bit type, rows = queries: per 16-row × 16-key
      // block four 8 × 8 matrices (rows 0-7 and 8-15 of keys 0-7, then of keys 8-15), each lane's
      // pair of each in the accumulator's layout. sm_90: one stmatrix a block and tensor (8 stores
      // a tensor at d128 instead of 32; the 4-byte stores' addresses had cost 32-56 bytes of
      // spills, ptxas); sm_80: four 4-byte stores.
#pragma unroll
    for (int mt = 0; mt < kSMTiles; ++mt)
#pragma unroll
      for (int j = 0; j < kSNTiles / 2; ++j) {
        std::uint32_t p[4], ds[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int nt = 2 * j + r / 2, e = 2 * (r % 2);
          p[r] = pack_pair<Element>(acc_s[mt][nt][e], acc_s[mt][nt][e + 1]);
          ds[r] = pack_pair<Element>(acc_dp[mt][nt][e], acc_dp[mt][nt][e + 1]);
        }
#if __CUDA_ARCH__ >= 900
        store_matrix_x4(ps_addresses.at(smem_p + s_row * kPRowBytes, mt, j), p);
        store_matrix_x4(ps_addresses.at(smem_ds + s_row * kPRowBytes, mt, j), ds);
#else
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int offset =
              swizzled_byte_offset<kPRowBytes>(s_row + mt * 16 + quad_row + 8 * (r % 2), s_key / 8 + 2 * j + r / 2) +
              4 * quad_col;
          *reinterpret_cast<std::uint32_t*>(shared_bytes + Traits::kPOffset + offset) = p[r];
          *reinterpret_cast<std::uint32_t*>(shared_bytes + Traits::kDsOffset + offset) = ds[r];
        }
#endif
      }
    __syncthreads();

    // dV += Pᵀ·dO and dK += dSᵀ·Q (k = the tile's queries).
    accumulate_transposed<Element, Traits::kQuerySteps>(acc_dv, pt_addresses, smem_p, kv_b_addresses, d_o_tile);
    accumulate_transposed<Element, Traits::kQuerySteps>(acc_dk, pt_addresses, smem_ds, kv_b_addresses, q_tile);

    if constexpr (kAtomicDq) {
      // dQ = dS·K (k = the tile's keys): dS as stored, K read transposed; added into the sums.
      float acc_dq[kDqMTiles][kDqDTiles][4];
      clear_accumulators(acc_dq);
#pragma unroll
      for (int ks = 0; ks < Traits::kKeySteps; ++ks) {
        std::uint32_t a[kDqMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kDqMTiles; ++mt)
          load_matrix_x4(a[mt], ds_addresses.at(smem_ds + dq_row * kPRowBytes, mt, ks));
#pragma unroll
        for (int dp = 0; dp < kDqDTiles / 2; ++dp) {
          std::uint32_t b[4];
          load_matrix_x4_transposed(b, dq_k_addresses.at(smem_k, ks, dp));
          multiply_b_pair(acc_dq, dp, a, b, mma);
        }
      }
#pragma unroll
      for (int mt = 0; mt < kDqMTiles; ++mt)
        add_dq_fragment<kHeadDim>(
            params.dq_accum +
                ((static_cast<std::int64_t>(batch) * params.heads_q + head) * params.seq_q_padded + row_begin + dq_row +
                 mt * 16 + quad_row) *
                    kHeadDim +
                dq_column + 2 * quad_col,
            acc_dq[mt]);
    }
  }
  wait_async_copies<0>();  // with no query tile, K and V may still be in flight

  // dK (times the scale) and dV of this thread's keys and columns.
#pragma unroll
  for (int mt = 0; mt < kKVMTiles; ++mt)
    store_key_gradient_columns<Element, Traits::kKVColumns>(
        params, key_begin + kv_key + mt * 16 + quad_row, kv_head, batch, kv_column, quad_col,
        [&](int dt, int e) { return acc_dk[mt][dt][e]; }, [&](int dt, int e) { return acc_dv[mt][dt][e]; });
}

}  // namespace attnsuite::cuda::flash2
