// sparge's predictor on the GPU: the rule of sparse::select_blocks (src/sparse/sparse.hpp),
// in two kernels. pool: one CTA per (batch, head, block) of Q or K, a warp per token row; the
// block's mean token and its self-similarity |mean of normalized rows|². select: one CTA per
// (batch, q head, q block): compressed scores q̄·k̄ᵀ·scale over the visible key blocks, softmax,
// a bitonic sort in shared memory (descending p, ties by index), a prefix sum to apply the cdf
// (or top-k) rule, the forced blocks, and an ordered compaction into the kept list.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/common/element.cuh"
#include "cuda/common/key_range.cuh"
#include "cuda/sparge/launch.hpp"

namespace attnsuite::cuda::sparge {
namespace {

constexpr int kPoolThreads = 128;
constexpr int kSelectThreads = 256;

// blockIdx.x: block, y: head, z: batch. `rows` tokens from `first`, seq rows in total.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kPoolThreads)
    pool_kernel(const Element* x, long long batch_stride, long long row_stride, long long head_stride, int seq,
                int heads, int block_rows, float* mean, float* sim) {
  constexpr int kPerLane = kHeadDim / 32;
  constexpr int kWarps = kPoolThreads / 32;
  __shared__ float partial_sum[kWarps][kHeadDim];
  __shared__ float partial_unit[kWarps][kHeadDim];
  __shared__ float sim_partial[kHeadDim / 32];
  const int block = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int first = block * block_rows;
  const int rows = min(block_rows, seq - first);
  const Element* base = x + b * batch_stride + head * head_stride;
  float sum[kPerLane], unit[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) sum[e] = unit[e] = 0.0f;
    // Unrolled so that a warp has several rows' loads in flight (each row ends in a shuffle sum).
#pragma unroll 4
  for (int r = warp; r < rows; r += kWarps) {
    const Element* row = base + static_cast<long long>(first + r) * row_stride;
    float v[kPerLane];
    float norm2 = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      v[e] = to_float(row[lane + 32 * e]);
      norm2 += v[e] * v[e];
    }
    norm2 = warp_sum(norm2);
    const float inverse = norm2 > 0.0f ? rsqrtf(norm2) : 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      sum[e] += v[e];
      unit[e] += v[e] * inverse;
    }
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    partial_sum[warp][lane + 32 * e] = sum[e];
    partial_unit[warp][lane + 32 * e] = unit[e];
  }
  __syncthreads();
  const long long item = (static_cast<long long>(b) * heads + head) * gridDim.x + block;
  for (int d = static_cast<int>(threadIdx.x); d < kHeadDim; d += kPoolThreads) {
    float s = 0.0f, u = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      s += partial_sum[w][d];
      u += partial_unit[w][d];
    }
    mean[item * kHeadDim + d] = s / static_cast<float>(rows);
    u /= static_cast<float>(rows);
    const float u2 = warp_sum(u * u);  // kHeadDim is a multiple of 32: whole warps take part
    if (d % 32 == 0) sim_partial[d / 32] = u2;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int i = 0; i < kHeadDim / 32; ++i) total += sim_partial[i];
    sim[item] = total;
  }
}

// Exclusive prefix sums of values[0, n) in place (blockDim.x a multiple of 32); returns the
// total. Each thread scans a contiguous chunk; warp 0 scans the chunk totals.
template <class T>
__device__ T block_exclusive_scan(T* values, int n, T* chunk_totals) {
  const int threads = static_cast<int>(blockDim.x), tid = static_cast<int>(threadIdx.x);
  const int chunk = (n + threads - 1) / threads;
  const int begin = min(n, tid * chunk), end = min(n, begin + chunk);
  T local = 0;
  for (int i = begin; i < end; ++i) local += values[i];
  chunk_totals[tid] = local;
  __syncthreads();
  if (tid < 32) {  // warp 0 scans the chunk totals: `per` consecutive ones per lane, then shuffles
    const int per = threads / 32;
    T lane_sum = 0;
    for (int k = 0; k < per; ++k) lane_sum += chunk_totals[tid * per + k];
    T inclusive = lane_sum;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const T up = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (tid >= offset) inclusive += up;
    }
    T running = inclusive - lane_sum;
    for (int k = 0; k < per; ++k) {
      const T v = chunk_totals[tid * per + k];
      chunk_totals[tid * per + k] = running;
      running += v;
    }
    if (tid == 31) chunk_totals[threads] = inclusive;
  }
  __syncthreads();
  T running = chunk_totals[tid];
  for (int i = begin; i < end; ++i) {
    const T v = values[i];
    values[i] = running;
    running += v;
  }
  __syncthreads();
  return chunk_totals[threads];
}

__device__ __forceinline__ bool ranks_before(float pa, int ia, float pb, int ib) {
  return pa > pb || (pa == pb && ia < ib);
}

template <int kHeadDim>
__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(const __grid_constant__ PredictorParams params, int sort_size) {
  extern __shared__ __align__(16) unsigned char shared[];
  float* q_bar = reinterpret_cast<float*>(shared);
  float* prob = q_bar + kHeadDim;
  int* order = reinterpret_cast<int*>(prob + sort_size);
  int* flag = order + sort_size;
  __shared__ float float_totals[kSelectThreads + 1];
  __shared__ int int_totals[kSelectThreads + 1];
  __shared__ float reduce[kSelectThreads / 32];

  const int m_block = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y),
            b = static_cast<int>(blockIdx.z);
  const int tid = static_cast<int>(threadIdx.x);
  const int kv_head = head / params.group_size;
  const long long slot = (static_cast<long long>(b) * params.heads_q + head) * params.m_blocks + m_block;
  int* out = params.block_index + slot * params.n_blocks;

  const int first = m_block * params.block_m;
  const int last = min(first + params.block_m, params.seq_q) - 1;
  const KeyRange first_keys = key_range(params, first), last_keys = key_range(params, last);
  if (last_keys.end <= first_keys.begin) {
    if (tid == 0) params.block_count[slot] = 0;
    return;
  }
  const int lo = first_keys.begin / params.block_n;
  const int hi = (last_keys.end + params.block_n - 1) / params.block_n;
  const int visible = hi - lo;
  const float sim_threshold = params.settings[4 * head + 0];
  const float cdf_threshold = params.settings[4 * head + 1];
  const float topk = params.settings[4 * head + 2];
  const bool dense = params.settings[4 * head + 3] != 0.0f;
  const bool keep_all = dense || params.q_sim[slot] < sim_threshold || (topk <= 0.0f && cdf_threshold >= 1.0f);
  if (keep_all) {
    for (int j = lo + tid; j < hi; j += kSelectThreads) out[j - lo] = j;
    if (tid == 0) {
      params.block_count[slot] = visible;
      atomicAdd(params.kept_blocks, static_cast<unsigned long long>(visible));
    }
    return;
  }

  const float* q_mean = params.q_mean + slot * kHeadDim;
  for (int d = tid; d < kHeadDim; d += kSelectThreads) q_bar[d] = q_mean[d];
  __syncthreads();
  const float* k_base =
      params.k_mean + (static_cast<long long>(b) * params.heads_kv + kv_head) * params.n_blocks * kHeadDim;
  // One warp per key block, its lanes across the head dim: every load of k̄ is one coalesced
  // 128-byte row segment. (v1 gave each thread a whole k̄ row, so a warp's load touched 32 rows:
  // 32 sectors per instruction; the predictor took 1.4 ms of sparge's 3.5 ms at N = 16k, d128,
  // 512 key blocks — H200, 2026-12-04, docs/kernels/history/sparge.md.)
  constexpr int kPerLane = kHeadDim / 32;
  const int warp = tid / 32, lane = tid % 32;
  float q_lane[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) q_lane[e] = q_bar[lane + 32 * e];
  float local_max = -INFINITY;
  for (int i = warp; i < sort_size; i += kSelectThreads / 32) {
    float score = -INFINITY;
    if (i < visible) {
      const float* k_bar = k_base + static_cast<long long>(lo + i) * kHeadDim;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) dot = fmaf(q_lane[e], k_bar[lane + 32 * e], dot);
      score = warp_sum(dot) * params.scale;  // every lane holds the sum
      local_max = fmaxf(local_max, score);
    }
    if (lane == 0) {
      prob[i] = score;
      order[i] = i;
    }
  }
  __syncthreads();
  // Block max, then Σ exp, then p.
  for (int offset = 16; offset > 0; offset >>= 1)
    local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, offset));
  if (tid % 32 == 0) reduce[tid / 32] = local_max;
  __syncthreads();
  float max_score = -INFINITY;
  for (int w = 0; w < kSelectThreads / 32; ++w) max_score = fmaxf(max_score, reduce[w]);
  __syncthreads();
  float local_sum = 0.0f;
  for (int i = tid; i < visible; i += kSelectThreads) {
    const float e = expf(prob[i] - max_score);
    prob[i] = e;
    local_sum += e;
  }
  local_sum = warp_sum(local_sum);
  if (tid % 32 == 0) reduce[tid / 32] = local_sum;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kSelectThreads / 32; ++w) total += reduce[w];
  for (int i = tid; i < sort_size; i += kSelectThreads) prob[i] = i < visible ? prob[i] / total : -1.0f;
  __syncthreads();

  // Bitonic sort of (p, index), best first.
  for (int size = 2; size <= sort_size; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < sort_size; i += kSelectThreads) {
        const int partner = i ^ stride;
        if (partner > i) {
          const bool forward = (i & size) == 0;
          const bool swap = forward ? ranks_before(prob[partner], order[partner], prob[i], order[i])
                                    : ranks_before(prob[i], order[i], prob[partner], order[partner]);
          if (swap) {
            const float p = prob[i];
            prob[i] = prob[partner];
            prob[partner] = p;
            const int o = order[i];
            order[i] = order[partner];
            order[partner] = o;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int i = tid; i < sort_size; i += kSelectThreads) flag[i] = 0;
  __syncthreads();
  if (topk > 0.0f) {
    const int take = max(1, min(visible, static_cast<int>(ceilf(topk * static_cast<float>(visible)))));
    for (int i = tid; i < take; i += kSelectThreads) flag[order[i]] = 1;
  } else {
    // Mass kept before sorted position i: keep i while that is below the cdf threshold.
    for (int i = tid; i < sort_size; i += kSelectThreads)
      if (i >= visible) prob[i] = 0.0f;
    __syncthreads();
    block_exclusive_scan(prob, visible, float_totals);
    for (int i = tid; i < visible; i += kSelectThreads)
      if (prob[i] < cdf_threshold) flag[order[i]] = 1;
  }
  __syncthreads();
  // Always kept: dissimilar key blocks, the sink, blocks the mask cuts through.
  const int unmasked_begin = last_keys.begin, unmasked_end = min(first_keys.end, last_keys.end);
  const float* k_sim = params.k_sim + (static_cast<long long>(b) * params.heads_kv + kv_head) * params.n_blocks;
  for (int i = tid; i < visible; i += kSelectThreads) {
    const int j = lo + i;
    const int key_begin = j * params.block_n, key_end = min(key_begin + params.block_n, params.seq_kv);
    if (k_sim[j] < sim_threshold || (params.sink != 0 && j == 0) || key_begin < unmasked_begin ||
        key_end > unmasked_end)
      flag[i] = 1;
  }
  __syncthreads();
  // Ordered compaction: position of each kept block = number of kept blocks before it.
  for (int i = tid; i < visible; i += kSelectThreads) order[i] = flag[i];
  __syncthreads();
  const int kept = block_exclusive_scan(order, visible, int_totals);
  for (int i = tid; i < visible; i += kSelectThreads)
    if (flag[i]) out[order[i]] = lo + i;
  if (tid == 0) {
    params.block_count[slot] = kept;
    atomicAdd(params.kept_blocks, static_cast<unsigned long long>(kept));
  }
}

// One warp per (batch, q head, q block): the kept list in chunks of 32 entries, each lane one
// entry; an entry starts a new tile when its tile differs from the previous entry's (the lane
// before, or the last tile of the previous chunk); a ballot and its prefix count place them.
constexpr int kCoarsenWarps = 4;
__global__ void __launch_bounds__(32 * kCoarsenWarps) coarsen_kernel(const __grid_constant__ CoarsenParams params) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const long long slot = static_cast<long long>(blockIdx.x) * kCoarsenWarps + warp;
  if (slot >= params.slots) return;
  const int* in = params.block_index + slot * params.n_blocks;
  int* out = params.tile_index + slot * params.n_tiles;
  const int count = params.block_count[slot];
  int written = 0, previous = -1;  // warp-uniform: tiles written, the last one
  for (int base = 0; base < count; base += 32) {
    const int entry = base + lane;
    const int tile = entry < count ? in[entry] / params.factor : -1;
    int before = __shfl_up_sync(0xffffffffu, tile, 1);
    if (lane == 0) before = previous;
    const bool fresh = entry < count && tile != before;
    const unsigned ballot = __ballot_sync(0xffffffffu, fresh);
    if (fresh) out[written + __popc(ballot & ((1u << lane) - 1u))] = tile;
    written += __popc(ballot);
    previous = __shfl_sync(0xffffffffu, tile, min(31, count - 1 - base));
  }
  if (lane == 0) {
    params.tile_count[slot] = written;
    if (params.kept_tiles != nullptr && written > 0)
      atomicAdd(params.kept_tiles, static_cast<unsigned long long>(written));
  }
}

int next_power_of_two(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

template <class Element, int kHeadDim>
void run_predictor(const PredictorParams& params, cudaStream_t stream) {
  // One CTA per (block, head, batch) of Q's blocks or K's.
  const auto blocks_grid = [&](int blocks, int heads) {
    return dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads), static_cast<unsigned>(params.batch));
  };
  const auto pool = [&](const void* x, long long batch_stride, long long row_stride, long long head_stride, int seq,
                        int heads, int block_rows, int blocks, float* mean, float* sim) {
    pool_kernel<Element, kHeadDim><<<blocks_grid(blocks, heads), kPoolThreads, 0, stream>>>(
        static_cast<const Element*>(x), batch_stride, row_stride, head_stride, seq, heads, block_rows, mean, sim);
  };
  pool(params.q, params.q_batch_stride, params.q_row_stride, params.q_head_stride, params.seq_q, params.heads_q,
       params.block_m, params.m_blocks, params.q_mean, params.q_sim);
  ATTNSUITE_CUDA_CHECK_LAUNCH("sparge pool_kernel (Q)");
  pool(params.k, params.k_batch_stride, params.k_row_stride, params.k_head_stride, params.seq_kv, params.heads_kv,
       params.block_n, params.n_blocks, params.k_mean, params.k_sim);
  ATTNSUITE_CUDA_CHECK_LAUNCH("sparge pool_kernel (K)");
  const int sort_size = next_power_of_two(params.n_blocks);
  const std::size_t smem = static_cast<std::size_t>(kHeadDim) * 4 + static_cast<std::size_t>(sort_size) * 12;
  const auto kernel = select_kernel<kHeadDim>;
  ATTNSUITE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<blocks_grid(params.m_blocks, params.heads_q), kSelectThreads, smem, stream>>>(params, sort_size);
  ATTNSUITE_CUDA_CHECK_LAUNCH("sparge select_kernel");
}

}  // namespace

template <class Element, int kHeadDim>
void run_block_sparse(const flash2::SparseParams& params, cudaStream_t stream);

void launch_predictor(const PredictorParams& params, DType dtype, void* stream) {
  dispatch_16bit(dtype, "sparge", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "sparge", [&](auto head_dim) {
      run_predictor<typename decltype(element)::type, decltype(head_dim)::value>(params,
                                                                                 static_cast<cudaStream_t>(stream));
    });
  });
}

void launch_coarsen(const CoarsenParams& params, void* stream) {
  if (params.slots <= 0) return;
  const auto blocks = static_cast<unsigned>((params.slots + kCoarsenWarps - 1) / kCoarsenWarps);
  coarsen_kernel<<<blocks, 32 * kCoarsenWarps, 0, static_cast<cudaStream_t>(stream)>>>(params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("sparge coarsen_kernel");
}

void launch_block_sparse(const flash2::SparseParams& params, DType dtype, void* stream) {
  dispatch_16bit(dtype, "the block-sparse kernel", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "the block-sparse kernel", [&](auto head_dim) {
      run_block_sparse<typename decltype(element)::type, decltype(head_dim)::value>(params,
                                                                                    static_cast<cudaStream_t>(stream));
    });
  });
}

}  // namespace attnsuite::cuda::sparge
