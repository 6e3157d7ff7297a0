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

// A row's LSE as the main kernels take it, in log2 units: -inf (the row sees no key, O = 0)
// becomes +inf, which makes its P 0 instead of 2^+inf.
__device__ __forceinline__ float lse_in_log2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
}

// The rows of the workspace handled per CTA by the row-wise kernels (one warp a row).
inline constexpr int kRowKernelWarps = 8;

// A row-wise kernel's rows: (batch, q head, row < rows_per_head), seq_q_padded rows a head for the
// workspace, seq_q for dQ.
__host__ __device__ inline std::int64_t row_kernel_rows(int batch, int heads_q, int rows_per_head) {
  return static_cast<std::int64_t>(batch) * heads_q * rows_per_head;
}

// This warp's row among row_kernel_rows (one warp a row; past the last one, nothing to do).
__device__ __forceinline__ std::int64_t warp_row_index() {
  return static_cast<std::int64_t>(blockIdx.x) * kRowKernelWarps + threadIdx.x / 32;
}

// A warp's row as (batch, head, row) and batch · heads_q + head, with the warp's lane.
struct WarpRow {
  std::int64_t batch_head;
  int lane, row, head, batch;
};

// Row `index` of row_kernel_rows(params.batch, params.heads_q, rows_per_head), split.
__device__ __forceinline__ WarpRow warp_row(std::int64_t index, const BackwardParams& params, int rows_per_head) {
  WarpRow w;
  w.lane = static_cast<int>(threadIdx.x) % 32;
  w.row = static_cast<int>(index % rows_per_head);
  w.batch_head = index / rows_per_head;
  w.head = static_cast<int>(w.batch_head % params.heads_q);
  w.batch = static_cast<int>(w.batch_head / params.heads_q);
  return w;
}

// kernel<<<…>>>(params) with one warp per row of row_kernel_rows(params.batch, params.heads_q,
// rows_per_head).
inline void launch_row_kernel(void (*kernel)(BackwardParams), const BackwardParams& params, int rows_per_head,
                              cudaStream_t stream) {
  const std::int64_t rows = row_kernel_rows(params.batch, params.heads_q, rows_per_head);
  kernel<<<static_cast<unsigned>((rows + kRowKernelWarps - 1) / kRowKernelWarps), kRowKernelWarps * 32, 0, stream>>>(
      params);
}

// One warp per workspace row (batch, q head, row < seq_q_padded).
template <class Element>
__global__ void __launch_bounds__(kRowKernelWarps * 32)
    backward_preprocess_kernel(const __grid_constant__ BackwardParams params) {
  const std::int64_t row_index = warp_row_index();
  if (row_index >= row_kernel_rows(params.batch, params.heads_q, params.seq_q_padded)) return;
  const WarpRow w = warp_row(row_index, params, params.seq_q_padded);
  float dot = 0.0f, lse_log2 = INFINITY;
  if (w.row < params.seq_q) {
    const auto* o = static_cast<const Element*>(params.o) + w.batch * params.o_batch_stride +
                    w.row * params.o_row_stride + w.head * params.o_head_stride;
    const auto* d_o = static_cast<const Element*>(params.d_o) + w.batch * params.d_o_batch_stride +
                      w.row * params.d_o_row_stride + w.head * params.d_o_head_stride;
    for (int c = w.lane; c < params.head_dim; c += 32) dot += to_float(o[c]) * to_float(d_o[c]);
    dot = warp_sum(dot);
    lse_log2 = lse_in_log2(params.lse[w.batch_head * params.seq_q + w.row]);
  }
  if (w.lane == 0) {
    params.lse_log2[row_index] = lse_log2;
    params.row_dot[row_index] = dot;
  }
  if (params.dq_accum != nullptr)
    for (int c = w.lane; c < params.head_dim; c += 32) params.dq_accum[row_index * params.head_dim + c] = 0.0f;
}

// The preprocess with 16-byte accesses (flash3's and flash2's default, backward_preprocess=vector;
// 2.6x faster on the H100): kHeadDim / 8 lanes a workspace row, each one 16-byte load of O and of dO (8
// elements) and 16-byte stores of zeros into the dQ sums, 32 / (kHeadDim / 8) rows a warp — a
// quarter (d64) or half (d128) of the warps and load instructions of backward_preprocess_kernel,
// whose one warp a row issues 2-byte loads. O's and dO's rows must be 16-byte aligned (flash3's
// TMA rule and flash2's cp.async rule hold them to it).
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kRowKernelWarps * 32)
    backward_preprocess_vector_kernel(const __grid_constant__ BackwardParams params) {
  constexpr int kLanes = kHeadDim / 8;
  static_assert(32 % kLanes == 0, "a row's lanes lie within one warp");
  const std::int64_t row_index = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int part = static_cast<int>(threadIdx.x) % kLanes;
  const bool live = row_index < row_kernel_rows(params.batch, params.heads_q, params.seq_q_padded);
  const int row = static_cast<int>(row_index % params.seq_q_padded);
  const std::int64_t batch_head = row_index / params.seq_q_padded;
  float dot = 0.0f;
  if (live && row < params.seq_q) {
    const int head = static_cast<int>(batch_head % params.heads_q),
              batch = static_cast<int>(batch_head / params.heads_q);
    const auto* o = static_cast<const Element*>(params.o) + batch * params.o_batch_stride + row * params.o_row_stride +
                    head * params.o_head_stride + 8 * part;
    const auto* d_o = static_cast<const Element*>(params.d_o) + batch * params.d_o_batch_stride +
                      row * params.d_o_row_stride + head * params.d_o_head_stride + 8 * part;
    const uint4 o_bits = *reinterpret_cast<const uint4*>(o), d_o_bits = *reinterpret_cast<const uint4*>(d_o);
    const auto* o8 = reinterpret_cast<const Element*>(&o_bits);
    const auto* d_o8 = reinterpret_cast<const Element*>(&d_o_bits);
#pragma unroll
    for (int i = 0; i < 8; ++i) dot += to_float(o8[i]) * to_float(d_o8[i]);
  }
  // The row's kLanes lanes (every lane of the warp takes part, rows past the end with 0).
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
  if (!live) return;
  if (part == 0) {
    params.lse_log2[row_index] =
        row < params.seq_q ? lse_in_log2(params.lse[batch_head * params.seq_q + row]) : INFINITY;
    params.row_dot[row_index] = dot;
  }
  if (params.dq_accum != nullptr) {
    auto* sums = reinterpret_cast<float4*>(params.dq_accum + row_index * kHeadDim);
#pragma unroll
    for (int i = part; i < kHeadDim / 4; i += kLanes) sums[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// One warp per dQ row (batch, q head, row < seq_q): dq = scale · the fp32 sums, 0 where the row
// sees no key (its sums may hold 0·NaN from a hidden key).
template <class Element>
__global__ void __launch_bounds__(kRowKernelWarps * 32)
    backward_convert_dq_kernel(const __grid_constant__ BackwardParams params) {
  const std::int64_t row_index = warp_row_index();
  if (row_index >= row_kernel_rows(params.batch, params.heads_q, params.seq_q)) return;
  const WarpRow w = warp_row(row_index, params, params.seq_q);
  const KeyRange keys = key_range(params, w.row);
  const bool sees = keys.begin < keys.end;
  const float* sums = params.dq_accum + (w.batch_head * params.seq_q_padded + w.row) * params.head_dim;
  auto* dq = static_cast<Element*>(params.dq) + w.batch * params.dq_batch_stride + w.row * params.dq_row_stride +
             w.head * params.dq_head_stride;
  for (int c = 2 * w.lane; c < params.head_dim; c += 64) {
    const float2 pair = *reinterpret_cast<const float2*>(sums + c);
    *reinterpret_cast<std::uint32_t*>(dq + c) =
        pack_row_pair<Element>(sees ? pair.x * params.scale : 0.0f, sees ? pair.y * params.scale : 0.0f);
  }
}

// The preprocess for every padded row, before the main kernel: D, LSE·log2 e, the dQ sums zeroed.
template <class Element>
void launch_backward_preprocess(const BackwardParams& params, cudaStream_t stream) {
  launch_row_kernel(backward_preprocess_kernel<Element>, params, params.seq_q_padded, stream);
  ATTNSUITE_CUDA_CHECK_LAUNCH("backward_preprocess_kernel");
}

// The same with 16-byte accesses (backward_preprocess_vector_kernel).
template <class Element, int kHeadDim>
void launch_backward_preprocess_vector(const BackwardParams& params, cudaStream_t stream) {
  constexpr int kRowsPerCta = kRowKernelWarps * 32 / (kHeadDim / 8);
  const std::int64_t rows = row_kernel_rows(params.batch, params.heads_q, params.seq_q_padded);
  backward_preprocess_vector_kernel<Element, kHeadDim>
      <<<static_cast<unsigned>((rows + kRowsPerCta - 1) / kRowsPerCta), kRowKernelWarps * 32, 0, stream>>>(params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("backward_preprocess_vector_kernel");
}

// dQ from the fp32 sums (atomic mode), after the main kernel.
template <class Element>
void launch_backward_convert_dq(const BackwardParams& params, cudaStream_t stream) {
  launch_row_kernel(backward_convert_dq_kernel<Element>, params, params.seq_q, stream);
  ATTNSUITE_CUDA_CHECK_LAUNCH("backward_convert_dq_kernel");
}

}  // namespace attnsuite::cuda
