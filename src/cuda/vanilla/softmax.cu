// cuda-vanilla's softmax: one block per score row, three passes over the row (max, sum, write)
// in fp32, P rounded to the scores' dtype in place, as PyTorch's softmax on a 16-bit tensor.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/element.cuh"
#include "cuda/common/key_range.cuh"
#include "cuda/vanilla/softmax.hpp"

namespace attnsuite::cuda::vanilla {
namespace {

constexpr int kThreads = 256;

template <bool kIsMax>
__device__ float block_reduce(float value, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = kIsMax ? fmaxf(value, other) : value + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by the previous reduction
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < kThreads / 32 ? scratch[lane] : (kIsMax ? -INFINITY : 0.0f);
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = kIsMax ? fmaxf(value, other) : value + other;
  }
  return value;
}

template <class Element>
__global__ void __launch_bounds__(kThreads) masked_softmax_kernel(const SoftmaxParams params) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t row_index = blockIdx.x;
  Element* row = static_cast<Element*>(params.scores) + row_index * params.seq_kv;
  const std::int64_t query = row_index % params.seq_q;
  const std::int64_t diag = query + params.seq_kv - params.seq_q;
  std::int64_t begin = 0, end = params.seq_kv;
  if (params.window_left >= 0) begin = max(begin, diag - params.window_left);
  if (params.window_right >= 0) end = min(end, diag + params.window_right + 1);
  const int key_begin = static_cast<int>(begin);
  const int key_end = static_cast<int>(max(end, begin));

  float row_max = -INFINITY;
  for (int j = key_begin + threadIdx.x; j < key_end; j += kThreads) row_max = fmaxf(row_max, to_float(row[j]));
  row_max = block_reduce<true>(row_max, scratch);
  float row_sum = 0.0f;
  for (int j = key_begin + threadIdx.x; j < key_end; j += kThreads) row_sum += expf(to_float(row[j]) - row_max);
  row_sum = block_reduce<false>(row_sum, scratch);

  // row_sum == 0 only where the row sees no key; a NaN sum (NaN or +Inf among the scores)
  // propagates to P and the LSE, as in PyTorch.
  const bool seen = row_sum != 0.0f;
  const float inverse = seen ? 1.0f / row_sum : 0.0f;
  for (int j = threadIdx.x; j < params.seq_kv; j += kThreads) {
    const bool kept = j >= key_begin && j < key_end;
    row[j] = from_float<Element>(kept ? expf(to_float(row[j]) - row_max) * inverse : 0.0f);
  }
  if (params.lse != nullptr && threadIdx.x == 0) {
    params.lse[row_index] = seen ? row_max + logf(row_sum) : -INFINITY;
  }
}

// One thread per (batch, head, query) row; a row that sees no key gets dim_v zeros.
template <class Element>
__global__ void zero_unseen_rows_kernel(const ZeroRowsParams params) {
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t rows = static_cast<std::int64_t>(params.batch) * params.heads_q * params.seq_q;
  if (row >= rows) return;
  const std::int64_t query = row % params.seq_q;
  const KeyRange keys = key_range(params, query);
  if (keys.begin < keys.end) return;
  const std::int64_t head = (row / params.seq_q) % params.heads_q;
  const std::int64_t batch = row / (static_cast<std::int64_t>(params.seq_q) * params.heads_q);
  Element* out = static_cast<Element*>(params.o) + batch * params.stride_batch + query * params.stride_seq +
                 head * params.stride_head;
  for (int d = 0; d < params.dim_v; ++d) out[d] = from_float<Element>(0.0f);
}

}  // namespace

void launch_zero_unseen_rows(const ZeroRowsParams& params, DType dtype, void* stream) {
  const std::int64_t rows = static_cast<std::int64_t>(params.batch) * params.heads_q * params.seq_q;
  constexpr int kRowThreads = 128;
  const dim3 grid(static_cast<unsigned>((rows + kRowThreads - 1) / kRowThreads));
  dispatch_16bit(dtype, "cuda-vanilla", [&](auto element) {
    zero_unseen_rows_kernel<typename decltype(element)::type>
        <<<grid, kRowThreads, 0, static_cast<cudaStream_t>(stream)>>>(params);
  });
  ATTNSUITE_CUDA_CHECK_LAUNCH("zero_unseen_rows_kernel");
}

void launch_masked_softmax(const SoftmaxParams& params, DType dtype, void* stream) {
  if (params.rows == 0) return;
  ATTNSUITE_CHECK(params.rows <= 0x7fffffff, ErrorKind::Unsupported, "cuda-vanilla: more than 2^31-1 score rows");
  const dim3 grid(static_cast<unsigned>(params.rows));
  dispatch_16bit(dtype, "cuda-vanilla softmax", [&](auto element) {
    masked_softmax_kernel<typename decltype(element)::type>
        <<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(params);
  });
  ATTNSUITE_CUDA_CHECK_LAUNCH("masked_softmax_kernel");
}

}  // namespace attnsuite::cuda::vanilla
