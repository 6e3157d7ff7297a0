// flash3-fp8's fused forward kernel (device code only): flash3's structure (kernel.cuh) with
// e4m3 Q, K, V, per-tensor descale factors and bf16 output.
//
// Differences from flash3:
//  - Q·Kᵀ is wgmma m64n128k32 e4m3 (Q and K K-major as TMA loads them: d contiguous);
//  - e4m3 wgmma reads B only K-major, so P·V needs Vᵀ (d × keys, keys contiguous): the producer
//    warpgroup's four warps transpose every V tile in shared memory into a second buffer, with
//    the keys of each 16-key group in the order of P's A-fragment registers (below), then
//    fence.proxy.async and arrive on a "Vᵀ full" barrier that the consumers wait on;
//  - P is converted from the fp32 accumulator straight to e4m3 A-fragment registers.
//
// The key permutation π (hopper/fp8_layout.hpp, checked on the CPU): thread c packs keys 2c,
// 2c+1, 2c+8, 2c+9 of each 16-key group of its accumulator into one register, and Vᵀ holds its
// keys in that order. The transpose applies π for free (it chooses which rows it reads).
//
// Scale factors: S is (Q₈·K₈ᵀ)·dq·dk, folded into the softmax's scale·log2e; O = (P₈·V₈)·dv / Σp,
// folded into the epilogue's 1/Σp. P = 2^(s − max) is in [0, 1] and is quantized as is.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/empty_tile.cuh"
#include "cuda/common/key_range.cuh"
#include "cuda/flash3/online_softmax.cuh"
#include "cuda/flash3/params.hpp"
#include "cuda/hopper/fp8_layout.hpp"
#include "cuda/hopper/fp8_primitives.cuh"
#include "cuda/hopper/pipeline.cuh"

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

// A consumer thread's registers across the main loop (as flash3's ConsumerState, kernel.cuh):
// P here is e4m3, 32 keys per A fragment of four registers.
template <class Traits>
struct Fp8ConsumerState {
  float acc_o[Traits::kHeadDim / 2];
  float acc_s[Traits::kTileN / 2];
  std::uint32_t p[Traits::kTileN / 32][4];
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  int thread_row = 0, quad_col = 0;
  int unmasked_key_begin = 0, unmasked_key_end = 0;
};

// S = Q·Kᵀ: head dim / 32 k-steps of 32 bytes inside the swizzled row.
template <class Traits>
__device__ __forceinline__ void fp8_issue_qk(float (&acc_s)[Traits::kTileN / 2], std::uint64_t q_descriptor,
                                             std::uint32_t k_tile) {
  const std::uint64_t k_descriptor =
      matrix_descriptor_swizzled<Traits::kSwizzleBytes>(k_tile, 16, Traits::kSwizzlePeriod);
#pragma unroll
  for (int k_step = 0; k_step < Traits::kHeadDim / 32; ++k_step)
    wgmma_ss_e4m3<Traits::kTileN>(acc_s, q_descriptor + 2 * k_step, k_descriptor + 2 * k_step, k_step > 0 ? 1 : 0);
}

// O += P·V: k-step j reads Vᵀ columns 32j .. 32j+31 (32 bytes into every 128-byte row).
template <class Traits>
__device__ __forceinline__ void fp8_issue_pv(Fp8ConsumerState<Traits>& state, std::uint32_t vt_tile) {
  const std::uint64_t vt_descriptor = matrix_descriptor_swizzled<128>(vt_tile, 16, 1024);
#pragma unroll
  for (int j = 0; j < Traits::kTileN / 32; ++j)
    wgmma_rs_e4m3<Traits::kHeadDim>(state.acc_o, state.p[j], vt_descriptor + 2 * j, 1);
}

template <class Traits>
__device__ __forceinline__ void fp8_fence_p(Fp8ConsumerState<Traits>& state) {
#pragma unroll
  for (int j = 0; j < Traits::kTileN / 32; ++j) fence_registers(state.p[j]);
}

// Mask (boundary tiles only), then the online softmax in place (scale_log2 includes dq·dk).
template <class Traits>
__device__ __forceinline__ void fp8_softmax_tile(const Params& params, Fp8ConsumerState<Traits>& state, int n_block,
                                                 float scale_log2, float (&correction)[2]) {
  constexpr int kTileN = Traits::kTileN;
  const int key_begin = n_block * kTileN;
  if (key_begin < state.unmasked_key_begin || key_begin + kTileN > state.unmasked_key_end) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
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
  online_softmax_tile<kTileN>(state.acc_s, state.row_max, state.row_sum, scale_log2, correction);
}

template <class Traits>
__device__ __forceinline__ void fp8_rescale_o(Fp8ConsumerState<Traits>& state, const float (&correction)[2]) {
#pragma unroll
  for (int i = 0; i < Traits::kHeadDim / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) state.acc_o[4 * i + e] *= correction[e / 2];
}

// P as e4m3 A fragments, 32 keys per k-step: accumulator entries 16j .. 16j+15 hold keys
// 32j + 8i' + 2c + e of rows (g, g+8); a[0] (row g) = keys 2c, 2c+1, 2c+8, 2c+9, a[1] the same of
// row g+8, a[2] / a[3] those keys + 16 (the π order that Vᵀ follows).
template <class Traits>
__device__ __forceinline__ void fp8_convert_p(Fp8ConsumerState<Traits>& state) {
#pragma unroll
  for (int j = 0; j < Traits::kTileN / 32; ++j) {
    const float* s = state.acc_s + 16 * j;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      using fp8_layout::p_entry;
      state.p[j][r] = pack_e4m3x4(s[p_entry(r, 0)], s[p_entry(r, 1)], s[p_entry(r, 2)], s[p_entry(r, 3)]);
    }
  }
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash3_fp8_forward_kernel(const __grid_constant__ Params params, const float* __restrict__ descales,
                              const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                              const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = __nv_bfloat16;  // the output
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kTileM = Traits::kTileM, kTileN = Traits::kTileN;
  constexpr int kStages = Traits::kStages;

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

  if (n_block_max <= n_block_min || last_row_keys.end <= first_row_keys.begin) {
    write_empty_tile<kTileM, kHeadDim, Traits::kThreads>(static_cast<int>(threadIdx.x), params, o_head, lse_head,
                                                         row_begin);
    return;
  }

  extern __shared__ __align__(1024) unsigned char shared_bytes[];
  const std::uint32_t smem = (shared_address(shared_bytes) + 1023u) & ~1023u;
  const std::uint32_t smem_q = smem + Traits::kQOffset;
  const std::uint32_t smem_k = smem + Traits::kKOffset;
  const std::uint32_t smem_v = smem + Traits::kVOffset;
  const std::uint32_t smem_vt = smem + Traits::kVtOffset;
  const std::uint32_t q_full = smem + Traits::kBarrierOffset;
  const BarrierRing<kStages> k_full{q_full, 1}, v_full{q_full, 1 + kStages}, vt_full{q_full, 1 + 2 * kStages};
  // Released separately (as in flash3 v2): K after S_j has been waited, V/Vᵀ after P_j·V_j.
  const BarrierRing<kStages> k_empty{q_full, 1 + 3 * kStages}, vt_empty{q_full, 1 + 4 * kStages};

  if (threadIdx.x == 0) {
    barrier_init(q_full, 1);
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(k_full[stage], 1);
      barrier_init(v_full[stage], 1);
      barrier_init(vt_full[stage], Traits::kProducerWarps);
      barrier_init(k_empty[stage], Traits::kConsumerWarps);
      barrier_init(vt_empty[stage], Traits::kConsumerWarps);
    }
    barrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (warpgroup == 0) {
    // ---- Producer: TMA copies (thread 0), V transposes (all four warps) ----
    release_registers<Traits::kProducerRegisters>();
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if (threadIdx.x == 0) {
      barrier_arrive_expect_bytes(q_full, Traits::kQBytes);
      tma_load_4d(smem_q, &q_map, 0, row_begin, head, batch, q_full);
    }
    int stage = 0;
    std::uint32_t phase = 0;
    for (int n_block = n_block_min; n_block < n_block_max; ++n_block) {
      const std::uint32_t v_tile = smem_v + stage * Traits::kKVBytes;
      if (threadIdx.x == 0) {
        // The consumers are done with K (then Vᵀ, which was made from this stage's previous V)
        // of this stage's previous tile.
        const int key_begin = n_block * kTileN;
        barrier_wait(k_empty[stage], phase ^ 1u);
        barrier_arrive_expect_bytes(k_full[stage], Traits::kKVBytes);
        tma_load_4d(smem_k + stage * Traits::kKVBytes, &k_map, 0, key_begin, kv_head, batch, k_full[stage]);
        barrier_wait(vt_empty[stage], phase ^ 1u);
        barrier_arrive_expect_bytes(v_full[stage], Traits::kKVBytes);
        tma_load_4d(v_tile, &v_map, 0, key_begin, kv_head, batch, v_full[stage]);
      }
      // V has landed (and so the stage was released: thread 0 waited for that before the copy).
      barrier_wait(v_full[stage], phase);
      transpose_v_tile<Traits>(v_tile, smem_vt + stage * Traits::kVtBytes, warp, lane);
      fence_proxy_async_shared();
      __syncwarp();
      if (lane == 0) barrier_arrive(vt_full[stage]);
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1u;
      }
    }
    return;
  }

  // ---- Consumers ----
  claim_registers<Traits::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int warpgroup_thread = static_cast<int>(threadIdx.x) % 128;
  const int quad_row = lane / 4, quad_col = lane % 4;
  const int thread_row = row_begin + consumer * Traits::kRowsPerConsumer + 16 * (warpgroup_thread / 32) + quad_row;

  const int unmasked_key_begin = last_row_keys.begin;
  const int unmasked_key_end = first_row_keys.end;

  // Per-tensor descales (written by the quantization pre-pass earlier on the stream).
  const float descale_qk = descales[0] * descales[1];
  const float descale_v = descales[2];
  const float scale_log2 = params.scale_log2 * descale_qk;
  const float scale = params.scale * descale_qk;

  Fp8ConsumerState<Traits> state;
  state.thread_row = thread_row;
  state.quad_col = quad_col;
  state.unmasked_key_begin = unmasked_key_begin;
  state.unmasked_key_end = unmasked_key_end;
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) state.acc_o[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < kTileN / 2; ++i) state.acc_s[i] = 0.0f;

  // This warpgroup's 64 Q rows start 64 rows into the tile (a multiple of the swizzle period).
  const std::uint64_t q_descriptor = matrix_descriptor_swizzled<Traits::kSwizzleBytes>(
      smem_q + consumer * Traits::kRowsPerConsumer * Traits::kRowBytes, 16, Traits::kSwizzlePeriod);
  barrier_wait(q_full, 0);

  auto k_tile = [&](int stage) { return smem_k + stage * Traits::kKVBytes; };
  auto vt_tile = [&](int stage) { return smem_vt + stage * Traits::kVtBytes; };

  if (params.serial_schedule) {
    // v1: one tile at a time.
    int stage = 0;
    std::uint32_t phase = 0;
    for (int n_block = n_block_min; n_block < n_block_max; ++n_block) {
      barrier_wait(k_full[stage], phase);
      fence_registers(state.acc_s);
      wgmma_fence();
      fp8_issue_qk<Traits>(state.acc_s, q_descriptor, k_tile(stage));
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(state.acc_s);
      float correction[2];
      fp8_softmax_tile(params, state, n_block, scale_log2, correction);
      fp8_rescale_o(state, correction);
      fp8_convert_p(state);
      barrier_wait(vt_full[stage], phase);
      fence_registers(state.acc_o);
      fp8_fence_p(state);
      wgmma_fence();
      fp8_issue_pv<Traits>(state, vt_tile(stage));
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(state.acc_o);
      if (lane == 0) {
        barrier_arrive(k_empty[stage]);
        barrier_arrive(vt_empty[stage]);
      }
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1u;
      }
    }
  } else {
    // v2, flash3's schedule (kernel.cuh): S_j issued with P_{j-1}·V_{j-1}, the softmax of tile j
    // under that P·V, ping-pong between the consumers on named barriers 1 and 2.
    const int my_barrier = 1 + consumer, other_barrier = 2 - consumer;
    constexpr int kPair = 2 * 128;
    if (consumer == 1) named_barrier_arrive(1, kPair);

    int stage = 0;
    std::uint32_t phase = 0;
    barrier_wait(k_full[stage], phase);
    named_barrier_sync(my_barrier, kPair);
    fence_registers(state.acc_s);
    wgmma_fence();
    fp8_issue_qk<Traits>(state.acc_s, q_descriptor, k_tile(stage));
    wgmma_commit();
    named_barrier_arrive(other_barrier, kPair);
    wgmma_wait<0>();
    fence_registers(state.acc_s);
    if (lane == 0) barrier_arrive(k_empty[stage]);
    {
      float correction[2];
      fp8_softmax_tile(params, state, n_block_min, scale_log2, correction);  // O is 0
    }
    fp8_convert_p(state);

    for (int n_block = n_block_min + 1; n_block < n_block_max; ++n_block) {
      const int previous_stage = stage;
      const std::uint32_t previous_phase = phase;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1u;
      }
      barrier_wait(k_full[stage], phase);
      barrier_wait(vt_full[previous_stage], previous_phase);
      named_barrier_sync(my_barrier, kPair);
      fence_registers(state.acc_s);
      fence_registers(state.acc_o);
      fp8_fence_p(state);
      wgmma_fence();
      fp8_issue_qk<Traits>(state.acc_s, q_descriptor, k_tile(stage));
      wgmma_commit();
      fp8_issue_pv<Traits>(state, vt_tile(previous_stage));
      wgmma_commit();
      named_barrier_arrive(other_barrier, kPair);
      wgmma_wait<1>();
      fence_registers(state.acc_s);
      if (lane == 0) barrier_arrive(k_empty[stage]);
      float correction[2];
      fp8_softmax_tile(params, state, n_block, scale_log2, correction);
      wgmma_wait<0>();
      fence_registers(state.acc_o);
      fp8_fence_p(state);
      if (lane == 0) barrier_arrive(vt_empty[previous_stage]);
      fp8_rescale_o(state, correction);
      fp8_convert_p(state);
    }

    barrier_wait(vt_full[stage], phase);
    named_barrier_sync(my_barrier, kPair);
    fence_registers(state.acc_o);
    fp8_fence_p(state);
    wgmma_fence();
    fp8_issue_pv<Traits>(state, vt_tile(stage));
    wgmma_commit();
    if (consumer == 0) named_barrier_arrive(other_barrier, kPair);
    wgmma_wait<0>();
    fence_registers(state.acc_o);
    if (lane == 0) barrier_arrive(vt_empty[stage]);
  }

  // Epilogue: O·dv / row sum, LSE = max·scale·dq·dk + ln(sum). A row that saw no key has sum 0:
  // O = 0 written as such (its P·V may hold 0·NaN from a NaN in V) and LSE = -inf. A NaN score
  // (NaN in Q or K, ±Inf quantized to NaN) makes the sum NaN, and so O and LSE NaN
  // (docs/reliability.md, "Defined numerics").
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = quad_sum(state.row_sum[half]);
    const bool no_key = sum == 0.0f;
    const float factor = descale_v / sum;
    const int row = thread_row + 8 * half;
    if (row < params.seq_q) {
      if (lse_head != nullptr && quad_col == 0) {
        lse_head[row] = no_key ? -INFINITY : state.row_max[half] * scale + logf(sum);
      }
      Element* o_row = o_head + row * params.o_row_stride + 2 * quad_col;
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i) {
        const float low = no_key ? 0.0f : state.acc_o[4 * i + 2 * half] * factor;
        const float high = no_key ? 0.0f : state.acc_o[4 * i + 2 * half + 1] * factor;
        *reinterpret_cast<std::uint32_t*>(o_row + 8 * i) = pack_pair<Element>(low, high);
      }
    }
  }
#else
  (void)params;
  (void)descales;
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

}  // namespace attnsuite::cuda::flash3
