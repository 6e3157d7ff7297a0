// sage's fused forward kernel (device code only): flash2's algorithm with quantized operands.
//
// Per CTA: kTileM query rows of one (batch, q head). The INT8 Q tile is loaded once (cp.async →
// swizzled shared memory); K (INT8) and V (sage: the caller's 16-bit V; sage2: FP8 e4m3,
// transposed, per-channel scales) stream through a kStages-deep cp.async ring. Per K tile:
//   S = Q8·K8ᵀ with mma.sync m16n8k32 s8 (int32), dequantized in fp32 by q_scale·k_scale, in
//       which the quantizer folded softmax scale · log2 e: S is in log2 units;
//   the online softmax as flash2 (running max and sum, exp2), masks as flash2;
//   sage:  O += P·V in 16-bit mma (P rounded to V's dtype, fp32 accumulation);
//   sage2: P → e4m3 as P·448 (P ≤ 1), O_tile = P8·V8 with m16n8k32 e4m3 MMAs into a fresh
//          fp32 accumulator, then O += O_tile in fp32 (two-level accumulation: the FP8 MMA's
//          own accumulation stays within one tile); 1/448 and V's channel scales are applied
//          once, in the epilogue.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/empty_tile.cuh"
#include "cuda/common/key_range.cuh"
#include "cuda/sage/params.hpp"
#include "cuda/sm80/softmax.cuh"
#include "cuda/sm80/tile.cuh"

namespace attnsuite::cuda::sage {

using namespace sm80;  // the mma.sync PTX wrappers and tiles (sm80/primitives.cuh, tile.cuh)

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    sage_forward_kernel(const __grid_constant__ Params params) {
  using Element = typename Traits::Element;
  constexpr bool kFp8PV = Traits::kMode == Mode::Sage2;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kTileM = Traits::kTileM, kTileN = Traits::kTileN;
  constexpr int kStages = Traits::kStages;
  constexpr int kMTiles = Traits::kMTiles, kNTiles = Traits::kNTiles, kDTiles = Traits::kDTiles;
  constexpr int kKSteps = Traits::kKSteps, kRowsPerWarp = Traits::kRowsPerWarp;
  constexpr int kQKRowBytes = kHeadDim;                       // INT8 rows
  constexpr int kVRowBytes = kFp8PV ? kTileN : kHeadDim * 2;  // Vᵀ rows (channels) or V rows (keys)
  constexpr int kVRows = kFp8PV ? kHeadDim : kTileN;

  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const std::uint32_t smem_q_base = shared_address(shared_bytes);
  const std::uint32_t smem_k_base = smem_q_base + Traits::kQBytes;
  const std::uint32_t smem_v_base = smem_k_base + kStages * Traits::kKBytes;

  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // heavy causal tiles first
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int kv_head = head / params.group_size;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int quad_row = lane / 4, quad_col = lane % 4;
  const int row_begin = m_block * kTileM;
  const int row_last = min(row_begin + kTileM, params.seq_q) - 1;

  const std::int64_t q_slice = static_cast<std::int64_t>(batch) * params.heads_q + head;
  const std::int64_t kv_slice = static_cast<std::int64_t>(batch) * params.heads_kv + kv_head;
  const char* q_head = reinterpret_cast<const char*>(params.q8) + q_slice * params.seq_q * kHeadDim;
  const char* k_head = reinterpret_cast<const char*>(params.k8) + kv_slice * params.seq_kv * kHeadDim;
  const char* v_head =
      kFp8PV ? reinterpret_cast<const char*>(params.vt8) + kv_slice * kHeadDim * params.v_keys
             : reinterpret_cast<const char*>(static_cast<const Element*>(params.v) + batch * params.v_batch_stride +
                                             kv_head * params.v_head_stride);
  const std::int64_t v_row_stride_bytes = kFp8PV ? params.v_keys : params.v_row_stride * 2;
  auto* o_head = static_cast<Element*>(params.o) + batch * params.o_batch_stride + head * params.o_head_stride;
  float* lse_head = params.lse != nullptr ? params.lse + q_slice * params.seq_q : nullptr;
  // Smooth-K's LSE shift (QuantParams::lse_shift), set whenever an LSE is written.
  const float* lse_shift_head = params.lse_shift != nullptr ? params.lse_shift + q_slice * params.seq_q : nullptr;
  const float* k_scale_head = params.k_scale + kv_slice * params.k_blocks;

  const KeyRange first_row_keys = key_range(params, row_begin);
  const KeyRange last_row_keys = key_range(params, row_last);
  const int n_block_min = first_row_keys.begin / kTileN;
  const int n_block_max = (last_row_keys.end + kTileN - 1) / kTileN;
  constexpr int kOutChunks = kHeadDim / 8;  // 16-byte chunks of an output row

  if (n_block_max <= n_block_min || last_row_keys.end <= first_row_keys.begin) {
    // No row of the tile sees a key: O = 0, LSE = -inf.
    write_empty_tile<kTileM, kHeadDim, Traits::kThreads>(static_cast<int>(threadIdx.x), params, o_head, lse_head,
                                                         row_begin);
    return;
  }
  const int unmasked_key_begin = last_row_keys.begin;
  const int unmasked_key_end = first_row_keys.end;

  auto load_kv_tile = [&](int n_block) {
    const int stage = (n_block - n_block_min) % kStages;
    const int key_begin = n_block * kTileN;
    load_rows_async<kTileN, kQKRowBytes, Traits::kThreads>(smem_k_base + stage * Traits::kKBytes,
                                                           k_head + static_cast<std::int64_t>(key_begin) * kHeadDim,
                                                           kHeadDim, params.seq_kv - key_begin, k_head);
    if constexpr (kFp8PV) {
      // Channel rows of kTileN keys; the padded key count is a multiple of the tile: no edge.
      load_rows_async<kVRows, kVRowBytes, Traits::kThreads>(smem_v_base + stage * Traits::kVBytes, v_head + key_begin,
                                                            v_row_stride_bytes, kVRows, v_head);
    } else {
      load_rows_async<kVRows, kVRowBytes, Traits::kThreads>(smem_v_base + stage * Traits::kVBytes,
                                                            v_head + key_begin * v_row_stride_bytes, v_row_stride_bytes,
                                                            params.seq_kv - key_begin, v_head);
    }
  };

  load_rows_async<kTileM, kQKRowBytes, Traits::kThreads>(smem_q_base,
                                                         q_head + static_cast<std::int64_t>(row_begin) * kHeadDim,
                                                         kHeadDim, params.seq_q - row_begin, q_head);
  commit_async_copies();
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (n_block_min + stage < n_block_max) load_kv_tile(n_block_min + stage);
    commit_async_copies();
  }

  const int warp_row = warp * kRowsPerWarp;
  // Lane patterns as flash2: A (Q, and V rows for sage's transposed loads) lanes 0-15 rows
  // 0-15 of chunk 2k, 16-31 of chunk 2k+1; B (K, and Vᵀ rows for sage2) lanes 0-7/8-15 rows
  // 0-7 of chunks 2k/2k+1, lanes 16-31 rows 8-15. An INT8/FP8 k-step of 32 bytes is two chunks,
  // like a 16-bit k-step of 16 elements, so the fragments are the same ldmatrix loads.
  const int a_row = (lane % 8) + 8 * ((lane / 8) % 2), a_chunk = lane / 16;
  const int b_row = (lane % 8) + 8 * (lane / 16), b_chunk = (lane / 8) % 2;
  const FragmentAddresses<kQKRowBytes> q_addresses(a_row, a_chunk);
  const FragmentAddresses<kQKRowBytes> k_addresses(b_row, b_chunk);
  const FragmentAddresses<kVRowBytes> v_addresses(kFp8PV ? b_row : a_row, kFp8PV ? b_chunk : a_chunk);
  const std::uint32_t smem_q_address = smem_q_base + warp_row * kQKRowBytes;

  // The Q scales of this lane's two fragment rows per mma tile (rows quad_row, quad_row + 8).
  float q_scale[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int block = (row_begin + warp_row + mt * 16 + quad_row + 8 * half) / Traits::kQBlockRows;
      q_scale[mt][half] = block < params.q_blocks ? params.q_scale[q_slice * params.q_blocks + block] : 0.0f;
    }

  constexpr int kQRegisterTiles = Traits::kQRegisterTiles;
  QFragments<kQRegisterTiles, kKSteps> q_frag;
  keep_q_fragments<kQRegisterTiles, kKSteps, kStages - 1>(q_frag, q_addresses, smem_q_address);

  float acc_o[kMTiles][kDTiles][4];
  float row_max[kMTiles][2], row_sum[kMTiles][2];
  start_rows(acc_o, row_max, row_sum);

  using ScoreTile = float[kMTiles][kNTiles][4];

  // S = dequant(Q8·K8ᵀ), in log2 units.
  auto compute_scores = [&](int n_block, ScoreTile& acc_s) {
    const int stage = (n_block - n_block_min) % kStages;
    const std::uint32_t k_tile = smem_k_base + stage * Traits::kKBytes;
    int acc[kMTiles][kNTiles][4];
    multiply_qk<kQRegisterTiles, kKSteps>(acc, q_frag, q_addresses, smem_q_address, k_addresses, k_tile,
                                          [](int(&acc)[4], const std::uint32_t(&a)[4], std::uint32_t b0,
                                             std::uint32_t b1) { mma_s8_16x8x32(acc, a, b0, b1); });
    // Dequantize: the K scale of the thread's columns 8·nt + 2·quad_col + e (k_scale_index: one
    // per 8-key mma tile for sage, one per thread and tile for sage2); int → float by the
    // exponent trick (int_to_float_exact: IADD + FADD instead of the quarter-rate I2F).
    static_assert(127 * 127 * kHeadDim < (1 << 22), "INT8 dot products must stay below 2^22");
    const int key_begin = n_block * kTileN;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const int block = k_scale_index(Traits::kMode, kHeadDim, key_begin + nt * 8 + 2 * quad_col);
      const float k_scale = block < params.k_blocks ? __ldg(k_scale_head + block) : 0.0f;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const float scale[2] = {q_scale[mt][0] * k_scale, q_scale[mt][1] * k_scale};
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = int_to_float_exact(acc[mt][nt][e]) * scale[e / 2];
      }
    }
  };

  // Mask (boundary tiles only), then flash2's online softmax in log2 units (scale 1).
  auto softmax = [&](int n_block, ScoreTile& acc_s) {
    const int key_begin = n_block * kTileN;
    if (key_begin < unmasked_key_begin || key_begin + kTileN > unmasked_key_end)
      mask_scores(params, acc_s, key_begin, row_begin, warp_row, quad_row, quad_col);
    online_softmax<true>(
        acc_s, acc_o, row_max, row_sum, [] { return 1.0f; }, [](float, float) {});
  };

  auto accumulate_pv = [&](int n_block, ScoreTile& acc_s) {
    const int stage = (n_block - n_block_min) % kStages;
    const std::uint32_t v_tile = smem_v_base + stage * Traits::kVBytes;
    if constexpr (!kFp8PV) {
      sm80::accumulate_pv<Element>(acc_o, acc_s, v_addresses, v_tile);  // flash2's P·V
    } else {
      // P8 = e4m3(P·448). A fragment of 32-key step kk: registers 0/1 hold rows quad_row /
      // quad_row + 8 of n-tiles 4kk, 4kk+1 (keys 2c, 2c+1, 8+2c, 9+2c), registers 2/3 those of
      // n-tiles 4kk+2, 4kk+3; Vᵀ's keys are stored in that order (v_key_position).
      constexpr int kSteps = kTileN / 32;
      std::uint32_t p[kMTiles][kSteps][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int nt = 4 * kk + 2 * (r / 2), e = 2 * (r % 2);
            p[mt][kk][r] = pack_e4m3_pair(acc_s[mt][nt][e] * kFp8Max, acc_s[mt][nt][e + 1] * kFp8Max) |
                           (pack_e4m3_pair(acc_s[mt][nt + 1][e] * kFp8Max, acc_s[mt][nt + 1][e + 1] * kFp8Max) << 16);
          }
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        float tile_o[kMTiles][2][4];
#pragma unroll
        for (int kk = 0; kk < kSteps; ++kk) {
          std::uint32_t b[4];
          load_matrix_x4(b, v_addresses.at(v_tile, dp, kk));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            if (kk == 0) {
              mma_e4m3_16x8x32_fresh(tile_o[mt][0], p[mt][kk], b[0], b[1]);
              mma_e4m3_16x8x32_fresh(tile_o[mt][1], p[mt][kk], b[2], b[3]);
            } else {
              mma_e4m3_16x8x32(tile_o[mt][0], p[mt][kk], b[0], b[1]);
              mma_e4m3_16x8x32(tile_o[mt][1], p[mt][kk], b[2], b[3]);
            }
          }
        }
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc_o[mt][2 * dp][e] += tile_o[mt][0][e];
            acc_o[mt][2 * dp + 1][e] += tile_o[mt][1][e];
          }
      }
    }
  };

  ScoreTile acc_s;
  for (int n_block = n_block_min; n_block < n_block_max; ++n_block) {
    wait_async_copies<kStages - 2>();
    __syncthreads();
    if (n_block + kStages - 1 < n_block_max) load_kv_tile(n_block + kStages - 1);
    commit_async_copies();
    compute_scores(n_block, acc_s);
    softmax(n_block, acc_s);
    accumulate_pv(n_block, acc_s);
  }
  wait_async_copies<0>();

  // Epilogue: O /= row sum (sage2: also · v_scale[channel] / 448); LSE = (max + log2 sum) · ln 2.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // sum == 0 only where the row saw no key: O = 0 even where V holds NaN/Inf (P·V gave
      // 0·NaN there). A NaN sum (NaN or +Inf among the row's scores) propagates to O and LSE.
      const float sum = quad_sum(row_sum[mt][half]);
      const bool seen = sum != 0.0f;
      const float inverse = 1.0f / sum;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float factor = inverse;
          if constexpr (kFp8PV) {
            const int channel = dt * 8 + 2 * quad_col + e;
            factor *= __ldg(params.v_scale + kv_slice * kHeadDim + channel) * (1.0f / kFp8Max);
          }
          acc_o[mt][dt][2 * half + e] = seen ? acc_o[mt][dt][2 * half + e] * factor : 0.0f;
        }
      const int row = row_begin + warp_row + mt * 16 + quad_row + 8 * half;
      if (lse_head != nullptr && quad_col == 0 && row < params.seq_q) {
        lse_head[row] =
            seen ? (row_max[mt][half] + log2f(sum)) * 0.69314718055994531f + lse_shift_head[row] : -INFINITY;
      }
    }

  // Stage O through the start of shared memory (every warp is done with Q, K and V first),
  // rows of kHeadDim 16-bit elements with flash2's swizzle, then store 16-byte chunks.
  __syncthreads();
  constexpr int kORowBytes = kHeadDim * 2;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row + mt * 16 + quad_row + 8 * half;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        *reinterpret_cast<std::uint32_t*>(shared_bytes + swizzled_byte_offset<kORowBytes>(row, dt) + 4 * quad_col) =
            pack_pair<Element>(acc_o[mt][dt][2 * half], acc_o[mt][dt][2 * half + 1]);
      }
    }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kRowsPerWarp * kOutChunks / 32; ++i) {
    const int index = i * 32 + lane;
    const int row = warp_row + index / kOutChunks, chunk = index % kOutChunks;
    if (row_begin + row < params.seq_q) {
      *reinterpret_cast<uint4*>(o_head + (row_begin + row) * params.o_row_stride + chunk * 8) =
          *reinterpret_cast<const uint4*>(shared_bytes + swizzled_byte_offset<kORowBytes>(row, chunk));
    }
  }
}

}  // namespace attnsuite::cuda::sage
