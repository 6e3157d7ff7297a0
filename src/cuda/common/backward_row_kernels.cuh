// The backward's row-wise kernels, shared by flash2's and flash3's backward (device code): the
// preprocess before the main kernel and, with atomic dQ, the conversion of the fp32 dQ sums after
// it. One warp per workspace row; BackwardParams (kernel_params.hpp), the workspace as
// backward_workspace.hpp lays it out.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/check.hpp"
#include "cuda/common/element.cuh"
#include "cuda/common/kernel_params.hpp"
#include "cuda/common/key_range.cuh"

namespace attnsuite::cuda {

// Two floats rounded to the 16-bit type, packed low-first (as sm80::pack_pair, which this room
// may not include).
template <class Element>
__device__ __forceinline__ std::uint32_t pack_row_pair(float low, float high) {
  if constexpr (std::is_same_v<Element, __half>) {
    const __half2 pair = __floats2half2_rn(low, high);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
  }
}

// The rows of the workspace handled per CTA by the row-wise kernels (one warp a row).
inline constexpr int kRowKernelWarps = 8;

// One warp per workspace row (batch, q head, row < seq_q_padded).
template <class Element>
__global__ void __launch_bounds__(kRowKernelWarps * 32)
    backward_preprocess_kernel(const __grid_constant__ BackwardParams params) {
  const std::int64_t row_index = static_cast<std::int64_t>(blockIdx.x) * kRowKernelWarps + threadIdx.x / 32;
  const std::int64_t rows = static_cast<std::int64_t>(params.batch) * params.heads_q * params.seq_q_padded;
  if (row_index >= rows) return;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = static_cast<int>(row_index % params.seq_q_padded);
  const std::int64_t batch_head = row_index / params.seq_q_padded;
  const int head = static_cast<int>(batch_head % params.heads_q);
  const int batch = static_cast<int>(batch_head / params.heads_q);
  float dot = 0.0f, lse_log2 = INFINITY;
  if (row < params.seq_q) {
    const auto* o = static_cast<const Element*>(params.o) + batch * params.o_batch_stride + row * params.o_row_stride +
                    head * params.o_head_stride;
    const auto* d_o = static_cast<const Element*>(params.d_o) + batch * params.d_o_batch_stride +
                      row * params.d_o_row_stride + head * params.d_o_head_stride;
    for (int c = lane; c < params.head_dim; c += 32) dot += to_float(o[c]) * to_float(d_o[c]);
    dot = warp_sum(dot);
    const float lse = params.lse[batch_head * params.seq_q + row];
    // -inf: the row sees no key (O = 0); +inf makes its P 0 instead of 2^+inf.
    lse_log2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
  }
  if (lane == 0) {
    params.lse_log2[row_index] = lse_log2;
    params.row_dot[row_index] = dot;
  }
  if (params.dq_accum != nullptr)
    for (int c = lane; c < params.head_dim; c += 32) params.dq_accum[row_index * params.head_dim + c] = 0.0f;
}

// One warp per dQ row (batch, q head, row < seq_q): dq = scale · the fp32 sums, 0 where the row
// sees no key (its sums may hold 0·NaN from a hidden key).
template <class Element>
__global__ void __launch_bounds__(kRowKernelWarps * 32)
    backward_convert_dq_kernel(const __grid_constant__ BackwardParams params) {
  const std::int64_t row_index = static_cast<std::int64_t>(blockIdx.x) * kRowKernelWarps + threadIdx.x / 32;
  const std::int64_t rows = static_cast<std::int64_t>(params.batch) * params.heads_q * params.seq_q;
  if (row_index >= rows) return;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row = static_cast<int>(row_index % params.seq_q);
  const std::int64_t batch_head = row_index / params.seq_q;
  const int head = static_cast<int>(batch_head % params.heads_q);
  const int batch = static_cast<int>(batch_head / params.heads_q);
  const KeyRange keys = key_range(params, row);
  const bool sees = keys.begin < keys.end;
  const float* sums = params.dq_accum + (batch_head * params.seq_q_padded + row) * params.head_dim;
  auto* dq = static_cast<Element*>(params.dq) + batch * params.dq_batch_stride + row * params.dq_row_stride +
             head * params.dq_head_stride;
  for (int c = 2 * lane; c < params.head_dim; c += 64) {
    const float2 pair = *reinterpret_cast<const float2*>(sums + c);
    *reinterpret_cast<std::uint32_t*>(dq + c) =
        pack_row_pair<Element>(sees ? pair.x * params.scale : 0.0f, sees ? pair.y * params.scale : 0.0f);
  }
}

// The preprocess for every padded row, before the main kernel: D, LSE·log2 e, the dQ sums zeroed.
template <class Element>
void launch_backward_preprocess(const BackwardParams& params, cudaStream_t stream) {
  const std::int64_t rows = static_cast<std::int64_t>(params.batch) * params.heads_q * params.seq_q_padded;
  backward_preprocess_kernel<Element>
      <<<static_cast<unsigned>((rows + kRowKernelWarps - 1) / kRowKernelWarps), kRowKernelWarps * 32, 0, stream>>>(
          params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("backward_preprocess_kernel");
}

// dQ from the fp32 sums (atomic mode), after the main kernel.
template <class Element>
void launch_backward_convert_dq(const BackwardParams& params, cudaStream_t stream) {
  const std::int64_t rows = static_cast<std::int64_t>(params.batch) * params.heads_q * params.seq_q;
  backward_convert_dq_kernel<Element>
      <<<static_cast<unsigned>((rows + kRowKernelWarps - 1) / kRowKernelWarps), kRowKernelWarps * 32, 0, stream>>>(
          params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("backward_convert_dq_kernel");
}

}  // namespace attnsuite::cuda
