// Launch of one configuration of sage's wgmma kernel: the three TMA descriptors, then the
// kernel. Included only by the instantiation TUs.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/hopper/tensor_map.hpp"
#include "cuda/sage/wgmma_kernel.cuh"
#include "cuda/sage/wgmma_run_forward.cuh"
#include "cuda/sage/wgmma_traits.cuh"
#include "cuda/sparge/launch.hpp"

namespace attnsuite::cuda::sage::wgmma {

template <class Kernel>
void run_kernel(const Params& params, cudaStream_t stream) {
  constexpr int kHeadDim = Kernel::kHeadDim;
  static_assert(Kernel::kTileM == sparge::kHopperTiles.m && Kernel::kTileN == sparge::kHopperTiles.n &&
                    Kernel::kRowsPerConsumer == sparge::kHopperTiles.rows_per_warp,
                "sparge-sage's block lists (sparge::kHopperTiles) count in this kernel's tiles");
  // A 4-D map (innermost first: columns, rows, heads, batch); `bytes`: 1-byte elements copied as
  // bits (INT8 Q/K, e4m3 Vᵀ).
  auto map_of = [&](const void* data, bool bytes, int columns, int rows, int heads, std::int64_t row_stride,
                    std::int64_t head_stride, std::int64_t batch_stride, int box_columns, int box_rows) {
    constexpr DType kDType = std::is_same_v<typename Kernel::Element, __half> ? DType::F16 : DType::BF16;
    return hopper::make_tensor_map(data, kDType, bytes, columns, rows, heads, params.batch, row_stride, head_stride,
                                   batch_stride, box_columns, box_rows);
  };
  // INT8 Q and K: dense [batch][heads][seq][head_dim] (quant.cu); one box = a whole tile of
  // rows of head_dim bytes (64B / 128B swizzle).
  const std::int64_t q_head = static_cast<std::int64_t>(params.seq_q) * kHeadDim;
  const std::int64_t k_head = static_cast<std::int64_t>(params.seq_kv) * kHeadDim;
  const CUtensorMap q_map = map_of(params.q8, true, kHeadDim, params.seq_q, params.heads_q, kHeadDim, q_head,
                                   q_head * params.heads_q, kHeadDim, Kernel::kTileM);
  const CUtensorMap k_map = map_of(params.k8, true, kHeadDim, params.seq_kv, params.heads_kv, kHeadDim, k_head,
                                   k_head * params.heads_kv, kHeadDim, Kernel::kTileN);
  CUtensorMap v_map;
  if constexpr (Kernel::kMode == Mode::Sage2) {
    // Vᵀ8: [batch][kv heads][head_dim][v_keys]; a box is 128 keys (128 bytes, 128B swizzle) of
    // every channel. Keys past v_keys (the last tile of a length that is not a multiple of
    // 128) are zero-filled; those between seq_kv and v_keys the quantizer wrote as zeros.
    const std::int64_t vt_head = static_cast<std::int64_t>(kHeadDim) * params.v_keys;
    v_map = map_of(params.vt8, true, static_cast<int>(params.v_keys), kHeadDim, params.heads_kv, params.v_keys, vt_head,
                   vt_head * params.heads_kv, Kernel::kTileN, kHeadDim);
  } else {
    // The caller's V, flash3's 64-column boxes (128 bytes, 128B swizzle) of kTileN rows.
    v_map = map_of(params.v, false, kHeadDim, params.seq_kv, params.heads_kv, params.v_row_stride, params.v_head_stride,
                   params.v_batch_stride, 64, Kernel::kTileN);
  }

  launch_kernel(sage_wgmma_forward_kernel<Kernel>, query_tile_grid<Kernel::kTileM>(params), Kernel::kThreads,
                Kernel::kSmemBytes, stream, params, q_map, k_map, v_map);
  ATTNSUITE_CUDA_CHECK_LAUNCH("sage_wgmma_forward_kernel");
}

template <Mode kMode, class Element, int kHeadDim, Schedule kSchedule, int kFmaExp2Every>
void run_forward(const Params& params, cudaStream_t stream) {
  run_kernel<typename Config<kMode, Element, kHeadDim, kSchedule, kFmaExp2Every>::Kernel>(params, stream);
}

}  // namespace attnsuite::cuda::sage::wgmma
