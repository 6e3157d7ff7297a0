// Launch of one flash3-fp8 configuration. Included only by the instantiation TUs.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/flash3/fp8_kernel.cuh"
#include "cuda/flash3/fp8_run_forward.cuh"
#include "cuda/flash3/fp8_traits.cuh"
#include "cuda/flash3/tensor_map.hpp"

namespace attnsuite::cuda::flash3 {

template <int kHeadDim>
void run_fp8_forward(const Params& params, const float* descales, cudaStream_t stream) {
  using Kernel = typename Fp8Config<kHeadDim>::Kernel;
  auto operand = [&](const void* data, int rows, int heads, std::int64_t batch_stride, std::int64_t row_stride,
                     std::int64_t head_stride, int box_rows) {
    TensorMapShape shape;
    shape.data = data;
    shape.e4m3 = true;
    shape.box_columns = kHeadDim;  // one box covers the whole row (64 or 128 bytes)
    shape.head_dim = params.head_dim;
    shape.rows = rows;
    shape.heads = heads;
    shape.batch = params.batch;
    shape.row_stride = row_stride;
    shape.head_stride = head_stride;
    shape.batch_stride = batch_stride;
    shape.box_rows = box_rows;
    return make_tensor_map(shape);
  };
  const CUtensorMap q_map = operand(params.q, params.seq_q, params.heads_q, params.q_batch_stride, params.q_row_stride,
                                    params.q_head_stride, Kernel::kTileM);
  const CUtensorMap k_map = operand(params.k, params.seq_kv, params.heads_kv, params.k_batch_stride,
                                    params.k_row_stride, params.k_head_stride, Kernel::kTileN);
  const CUtensorMap v_map = operand(params.v, params.seq_kv, params.heads_kv, params.v_batch_stride,
                                    params.v_row_stride, params.v_head_stride, Kernel::kTileN);

  const auto kernel = flash3_fp8_forward_kernel<Kernel>;
  ATTNSUITE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSmemBytes));
  const dim3 grid(static_cast<unsigned>((params.seq_q + Kernel::kTileM - 1) / Kernel::kTileM),
                  static_cast<unsigned>(params.heads_q), static_cast<unsigned>(params.batch));
  kernel<<<grid, Kernel::kThreads, Kernel::kSmemBytes, stream>>>(params, descales, q_map, k_map, v_map);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3_fp8_forward_kernel");
}

}  // namespace attnsuite::cuda::flash3
