// Launch of flash3's backward for one (dtype, head dim): the preprocess, the main kernel
// (backward_kernel.cuh) with the TMA descriptors of Q, K, V and dO, and the dQ conversion (from the
// sums' fragment order).
// Included only by the instantiation TUs (backward_<dtype>_d<head dim>.cu).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/backward_preprocess.hpp"
#include "cuda/common/backward_row_kernels.cuh"
#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/flash3/backward_kernel.cuh"
#include "cuda/flash3/backward_traits.cuh"
#include "cuda/flash3/run_backward.cuh"
#include "cuda/flash3/tensor_map.hpp"

namespace attnsuite::cuda::flash3 {

template <class Element, int kHeadDim, bool kWideEpilogue, int kHeadGroup>
void run_backward(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess) {
  using Kernel = typename BackwardConfig<Element, kHeadDim, kWideEpilogue, kHeadGroup>::Kernel;
  constexpr DType kDType = std::is_same_v<Element, __half> ? DType::F16 : DType::BF16;
  // 64-column boxes (128B swizzle): kTileM rows of Q and dO, kTileN rows of K and V.
  auto map = [&](const void* data, int rows, int heads, std::int64_t row_stride, std::int64_t head_stride,
                 std::int64_t batch_stride, int box_rows) {
    return make_tensor_map(data, kDType, false, kHeadDim, rows, heads, params.batch, row_stride, head_stride,
                           batch_stride, 64, box_rows);
  };
  const CUtensorMap q_map = map(params.q, params.seq_q, params.heads_q, params.q_row_stride, params.q_head_stride,
                                params.q_batch_stride, Kernel::kTileM);
  const CUtensorMap d_o_map = map(params.d_o, params.seq_q, params.heads_q, params.d_o_row_stride,
                                  params.d_o_head_stride, params.d_o_batch_stride, Kernel::kTileM);
  const CUtensorMap k_map = map(params.k, params.seq_kv, params.heads_kv, params.k_row_stride, params.k_head_stride,
                                params.k_batch_stride, Kernel::kTileN);
  const CUtensorMap v_map = map(params.v, params.seq_kv, params.heads_kv, params.v_row_stride, params.v_head_stride,
                                params.v_batch_stride, Kernel::kTileN);

  if (vector_preprocess) {
    launch_vector_preprocess(params, kDType, stream);
  } else {
    launch_backward_preprocess<Element>(params, stream);
  }
  // The grid's order (traits): x = key tile · kHeadGroup + head in the group, y = head group.
  const dim3 grid(static_cast<unsigned>((params.seq_kv + Kernel::kTileN - 1) / Kernel::kTileN * kHeadGroup),
                  static_cast<unsigned>((params.heads_kv + kHeadGroup - 1) / kHeadGroup),
                  static_cast<unsigned>(params.batch));
  launch_kernel(flash3_backward_kernel<Kernel>, grid, Kernel::kThreads, Kernel::kSmemBytes, stream, params, q_map,
                k_map, v_map, d_o_map);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3_backward_kernel");
  // dQ from the sums in the tiles' fragment order (add_dq_bulk): one CTA a 64-row tile.
  const std::int64_t tiles = static_cast<std::int64_t>(params.batch) * params.heads_q * ((params.seq_q + 63) / 64);
  convert_dq_tiles_kernel<Element, kHeadDim><<<static_cast<unsigned>(tiles), 256, 0, stream>>>(params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("convert_dq_tiles_kernel");
}

}  // namespace attnsuite::cuda::flash3
