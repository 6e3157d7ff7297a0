#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/check.hpp"
#include "cuda/common/element.cuh"
#include "ring/cuda/merge.hpp"

namespace attnsuite::cuda::ring_kernels {

namespace {

constexpr int kWarpsPerBlock = 4;

// One warp per query row (b, s, h): the weights from the two LSEs, then dv elements.
template <class T>
__global__ void merge_kernel(float* __restrict__ acc_o, float* __restrict__ acc_lse, const T* __restrict__ part_o,
                             const float* __restrict__ part_lse, std::int64_t batch, std::int64_t length,
                             std::int64_t heads, int dv) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= batch * length * heads) return;
  // row = (b · length + s) · heads + h; the LSEs are (b · heads + h) · length + s.
  const std::int64_t h = row % heads, s = (row / heads) % length, b = row / (heads * length);
  const std::int64_t lse_index = (b * heads + h) * length + s;
  const float a = acc_lse[lse_index], p = part_lse[lse_index];
  if (p == -INFINITY) return;
  float wa = 0.0f, wb = 1.0f, lse = p;
  if (a != -INFINITY) {
    // Ternaries, not fmaxf/fminf, as the host merge_row (ring/lse_merge.hpp): fmaxf drops a NaN
    // operand, which left a row that sees a NaN key with a NaN O but a finite LSE (H200 test
    // EveryBackend/Numerics.NanInAKeyMakesTheRowsThatSeeItNan/ring, 2026-12-04, 4th session).
    const float hi = a > p ? a : p, lo = a > p ? p : a;
    lse = hi + log1pf(expf(lo - hi));
    wa = expf(a - lse);
    wb = expf(p - lse);
  }
  float* o = acc_o + row * dv;
  const T* q = part_o + row * dv;
  for (int d = lane; d < dv; d += 32) o[d] = wa * o[d] + wb * to_float(q[d]);
  __syncwarp();
  if (lane == 0) acc_lse[lse_index] = lse;
}

__global__ void init_kernel(float* __restrict__ acc_o, float* __restrict__ acc_lse, std::int64_t rows, int dv) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * dv) acc_o[i] = 0.0f;
  if (i < rows) acc_lse[i] = -INFINITY;
}

template <class T>
__global__ void round_kernel(T* __restrict__ out, const float* __restrict__ acc_o, std::int64_t count) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = from_float<T>(acc_o[i]);
}

unsigned blocks_for(std::int64_t items, int per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

}  // namespace

void launch_merge(float* acc_o, float* acc_lse, const void* part_o, const float* part_lse, DType dtype,
                  std::int64_t batch, std::int64_t length, std::int64_t heads, int dv, void* stream) {
  const std::int64_t rows = batch * length * heads;
  if (rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::F16) {
    merge_kernel<__half><<<blocks_for(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(
        acc_o, acc_lse, static_cast<const __half*>(part_o), part_lse, batch, length, heads, dv);
  } else {
    merge_kernel<__nv_bfloat16><<<blocks_for(rows, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s>>>(
        acc_o, acc_lse, static_cast<const __nv_bfloat16*>(part_o), part_lse, batch, length, heads, dv);
  }
  ATTNSUITE_CUDA_CHECK_LAUNCH("ring merge_kernel");
}

void launch_init(float* acc_o, float* acc_lse, std::int64_t rows, int dv, void* stream) {
  const std::int64_t items = rows * dv;
  if (items == 0) return;
  init_kernel<<<blocks_for(items, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(acc_o, acc_lse, rows, dv);
  ATTNSUITE_CUDA_CHECK_LAUNCH("ring init_kernel");
}

void launch_round(void* out, const float* acc_o, DType dtype, std::int64_t count, void* stream) {
  if (count == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::F16) {
    round_kernel<__half><<<blocks_for(count, 256), 256, 0, s>>>(static_cast<__half*>(out), acc_o, count);
  } else {
    round_kernel<__nv_bfloat16><<<blocks_for(count, 256), 256, 0, s>>>(static_cast<__nv_bfloat16*>(out), acc_o, count);
  }
  ATTNSUITE_CUDA_CHECK_LAUNCH("ring round_kernel");
}

}  // namespace attnsuite::cuda::ring_kernels
