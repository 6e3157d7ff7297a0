// The quantization kernels of sage and sage2 (rules in quant_rule.hpp):
//   stats       partial channel sums of K (smooth-K) and partial channel |V| maxima (sage2),
//               per split of kStatsRowsPerSplit keys: no atomics, so the mean is deterministic;
//   rows        Q or K → INT8 with one fp32 scale per block of rows; K first has its channel
//               mean (the partials summed in order) subtracted;
//   v           V → FP8 e4m3 with one scale per channel, written transposed (head_dim × keys,
//               keys permuted per 16 as the FP8 P·V MMA's operands want, v_key_position).
// All read 16-byte chunks of 8 elements of the strided (batch, seq, heads, head_dim) input.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdint>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/sage/launch.hpp"
#include "cuda/sage/quant_rule.hpp"

namespace attnsuite::cuda::sage {
namespace {

constexpr int kThreads = 256;

template <class Element>
__device__ __forceinline__ void load_8(const Element* src, float (&out)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const Element* e = reinterpret_cast<const Element*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = static_cast<float>(e[j]);
}

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) stats_kernel(const StatsParams p) {
  constexpr int kChunks = kHeadDim / 8;             // threads per row
  constexpr int kRowGroups = kThreads / kChunks;    // rows read at once
  __shared__ float sums[kRowGroups][kHeadDim];
  __shared__ std::uint32_t amaxes[kRowGroups][kHeadDim];
  const int split = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y),
            batch = static_cast<int>(blockIdx.z);
  const int chunk = static_cast<int>(threadIdx.x) % kChunks, group = static_cast<int>(threadIdx.x) / kChunks;
  const auto* k = static_cast<const Element*>(p.k) + batch * p.k_batch_stride + head * p.k_head_stride + chunk * 8;
  const auto* v = p.v != nullptr
                      ? static_cast<const Element*>(p.v) + batch * p.v_batch_stride + head * p.v_head_stride + chunk * 8
                      : nullptr;
  float sum[8] = {};
  std::uint32_t amax[8] = {};
  const int row_end = min(p.seq, (split + 1) * kStatsRowsPerSplit);
  for (int row = split * kStatsRowsPerSplit + group; row < row_end; row += kRowGroups) {
    float x[8];
    load_8(k + row * p.k_row_stride, x);
#pragma unroll
    for (int j = 0; j < 8; ++j) sum[j] += x[j];
    if (v != nullptr) {
      load_8(v + row * p.v_row_stride, x);
#pragma unroll
      for (int j = 0; j < 8; ++j) amax[j] = max(amax[j], abs_bits(x[j]));
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    sums[group][chunk * 8 + j] = sum[j];
    amaxes[group][chunk * 8 + j] = amax[j];
  }
  __syncthreads();
  const std::int64_t out = ((static_cast<std::int64_t>(batch) * p.heads + head) * p.splits + split) * kHeadDim;
  for (int c = static_cast<int>(threadIdx.x); c < kHeadDim; c += kThreads) {
    float s = 0.0f;
    std::uint32_t m = 0;
    for (int g = 0; g < kRowGroups; ++g) {  // fixed order: deterministic
      s += sums[g][c];
      m = max(m, amaxes[g][c]);
    }
    p.k_sum[out + c] = s;
    if (v != nullptr) p.v_amax[out + c] = m;
  }
}

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const QuantParams p) {
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kPerThread = kQuantRowsPerCta * kChunks / kThreads;
  static_assert(kPerThread * kThreads == kQuantRowsPerCta * kChunks, "chunks divide among the threads");
  __shared__ float mean[kHeadDim];
  __shared__ std::uint32_t row_amax[kQuantRowsPerCta];
  __shared__ float block_inverse[kQuantRowsPerCta];
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int row_begin = static_cast<int>(blockIdx.x) * kQuantRowsPerCta;
  const std::int64_t slice = static_cast<std::int64_t>(batch) * p.heads + head;
  const auto* x = static_cast<const Element*>(p.x) + batch * p.batch_stride + head * p.head_stride;

  for (int c = static_cast<int>(threadIdx.x); c < kHeadDim; c += kThreads) {
    float m = 0.0f;
    if (p.mean_partials != nullptr) {
      const float* partial = p.mean_partials + slice * p.splits * kHeadDim + c;
      float s = 0.0f;
      for (int split = 0; split < p.splits; ++split) s += partial[split * kHeadDim];
      m = s / static_cast<float>(p.seq);
    }
    mean[c] = m;
  }
  for (int r = static_cast<int>(threadIdx.x); r < kQuantRowsPerCta; r += kThreads) row_amax[r] = 0;
  __syncthreads();

  float values[kPerThread][8];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int index = i * kThreads + static_cast<int>(threadIdx.x);
    const int r = index / kChunks, chunk = index % kChunks, row = row_begin + r;
    std::uint32_t amax = 0;
    if (row < p.seq) {
      load_8(x + row * p.row_stride + chunk * 8, values[i]);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        values[i][j] -= mean[chunk * 8 + j];
        amax = max(amax, abs_bits(values[i][j]));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) values[i][j] = 0.0f;
    }
    atomicMax(&row_amax[r], amax);
  }
  __syncthreads();
  const int blocks_here = kQuantRowsPerCta / p.block_rows;
  if (static_cast<int>(threadIdx.x) < blocks_here) {
    const int b = static_cast<int>(threadIdx.x);
    std::uint32_t bits = 0;
    for (int r = b * p.block_rows; r < (b + 1) * p.block_rows; ++r) bits = max(bits, row_amax[r]);
    const float amax = bits_float(bits);
    block_inverse[b] = int8_inverse_scale(amax);
    const int global_block = row_begin / p.block_rows + b;
    if (global_block < p.blocks) p.scale[slice * p.blocks + global_block] = amax / kInt8Max * p.scale_multiplier;
  }
  __syncthreads();
  std::int8_t* out = p.out + slice * p.seq * kHeadDim;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int index = i * kThreads + static_cast<int>(threadIdx.x);
    const int r = index / kChunks, chunk = index % kChunks, row = row_begin + r;
    if (row >= p.seq) continue;
    const float inverse = block_inverse[r / p.block_rows];
    std::uint32_t packed[2];
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      std::uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        word |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(quantize_int8(values[i][4 * w + j], inverse)))
                << (8 * j);
      packed[w] = word;
    }
    *reinterpret_cast<uint2*>(out + static_cast<std::int64_t>(row) * kHeadDim + chunk * 8) =
        make_uint2(packed[0], packed[1]);
  }
}

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) quantize_v_kernel(const VQuantParams p) {
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kKeys = kVKeyPad;  // keys per CTA
  constexpr int kPerThread = kKeys * kChunks / kThreads;
  static_assert(kPerThread * kThreads == kKeys * kChunks, "chunks divide among the threads");
  __shared__ float inverse[kHeadDim];
  __shared__ __align__(16) std::uint8_t tile[kHeadDim][kKeys];
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int key_begin = static_cast<int>(blockIdx.x) * kKeys;
  const std::int64_t slice = static_cast<std::int64_t>(batch) * p.heads + head;

  for (int c = static_cast<int>(threadIdx.x); c < kHeadDim; c += kThreads) {
    std::uint32_t bits = 0;
    const std::uint32_t* partial = p.v_amax + slice * p.splits * kHeadDim + c;
    for (int split = 0; split < p.splits; ++split) bits = max(bits, partial[split * kHeadDim]);
    const float amax = bits_float(bits);
    inverse[c] = fp8_inverse_scale(amax);
    if (blockIdx.x == 0) p.v_scale[slice * kHeadDim + c] = amax / kFp8Max;
  }
  __syncthreads();
  const auto* v = static_cast<const Element*>(p.v) + batch * p.batch_stride + head * p.head_stride;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int index = i * kThreads + static_cast<int>(threadIdx.x);
    const int r = index / kChunks, chunk = index % kChunks, key = key_begin + r;
    float values[8] = {};
    if (key < p.seq) load_8(v + key * p.row_stride + chunk * 8, values);
    const int position = v_key_position(r);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = chunk * 8 + j;
      // Padding keys stay 0 (finite: P is 0 there, and 0 · NaN would not be).
      tile[c][position] = static_cast<std::uint8_t>(
          __nv_cvt_float_to_fp8(values[j] * inverse[c], __NV_SATFINITE, __NV_E4M3));
    }
  }
  __syncthreads();
  std::uint8_t* vt = p.vt + slice * kHeadDim * p.padded_keys + key_begin;
  for (int index = static_cast<int>(threadIdx.x); index < kHeadDim * (kKeys / 16); index += kThreads) {
    const int c = index / (kKeys / 16), chunk = index % (kKeys / 16);
    *reinterpret_cast<uint4*>(vt + c * p.padded_keys + chunk * 16) =
        *reinterpret_cast<const uint4*>(&tile[c][chunk * 16]);
  }
}

// A CTA per (64 query rows, q head, batch): the K mean of the head's kv head once into shared
// memory (the same sum, in the same order, as quantize_rows_kernel's), then one warp per row:
// the dot product of the row (16-bit, 8 elements a lane) with it, reduced over the warp.
// −inf (no key) stays −inf; NaN stays NaN.
constexpr int kLseRowsPerCta = 64;

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) lse_shift_kernel(const LseShiftParams p) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float mean[kHeadDim];
  const int head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  const int kv = head / p.group_size;
  const float* partial = p.k_sum + (static_cast<std::int64_t>(batch) * p.heads_kv + kv) * p.splits * kHeadDim;
  for (int c = static_cast<int>(threadIdx.x); c < kHeadDim; c += kThreads) {
    float s = 0.0f;
    for (int split = 0; split < p.splits; ++split) s += partial[split * kHeadDim + c];
    mean[c] = s / static_cast<float>(p.seq_kv);
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const auto* q_head = static_cast<const Element*>(p.q) + batch * p.batch_stride + head * p.head_stride;
  float* lse_head = p.lse + (static_cast<std::int64_t>(batch) * p.heads_q + head) * p.seq_q;
  const int row_end = min(p.seq_q, (static_cast<int>(blockIdx.x) + 1) * kLseRowsPerCta);
  for (int i = static_cast<int>(blockIdx.x) * kLseRowsPerCta + warp; i < row_end; i += kWarps) {
    float dot = 0.0f;
    for (int chunk = lane; chunk < kHeadDim / 8; chunk += 32) {
      float x[8];
      load_8(q_head + i * p.row_stride + chunk * 8, x);
#pragma unroll
      for (int j = 0; j < 8; ++j) dot += x[j] * mean[chunk * 8 + j];
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) {
      const float value = lse_head[i];
      if (value != -INFINITY) lse_head[i] = value + p.scale * dot;
    }
  }
}

__global__ void probe_kernel() {}

template <template <class, int> class Launch, class Params>
void dispatch(const Params& params, DType dtype, int head_dim, cudaStream_t stream) {
  const auto by_dim = [&](auto element) {
    using Element = decltype(element);
    switch (head_dim) {
      case 64: return Launch<Element, 64>::run(params, stream);
      case 128: return Launch<Element, 128>::run(params, stream);
      default:
        throw Error(ErrorKind::Unsupported,
                    fmt::format("head dim {} not supported by the sage quantizers; allowed: 64, 128", head_dim));
    }
  };
  switch (dtype) {
    case DType::F16: return by_dim(__half{});
    case DType::BF16: return by_dim(__nv_bfloat16{});
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("dtype {} not supported by the sage quantizers; allowed: fp16, bf16", to_string(dtype)));
  }
}

dim3 grid_of(int x_blocks, int heads, int batch) {
  return dim3(static_cast<unsigned>(x_blocks), static_cast<unsigned>(heads), static_cast<unsigned>(batch));
}

template <class Element, int kHeadDim>
struct StatsLaunch {
  static void run(const StatsParams& p, cudaStream_t stream) {
    stats_kernel<Element, kHeadDim><<<grid_of(p.splits, p.heads, p.batch), kThreads, 0, stream>>>(p);
    ATTNSUITE_CUDA_CHECK_LAUNCH("sage stats_kernel");
  }
};
template <class Element, int kHeadDim>
struct RowsLaunch {
  static void run(const QuantParams& p, cudaStream_t stream) {
    const int ctas = (p.seq + kQuantRowsPerCta - 1) / kQuantRowsPerCta;
    quantize_rows_kernel<Element, kHeadDim><<<grid_of(ctas, p.heads, p.batch), kThreads, 0, stream>>>(p);
    ATTNSUITE_CUDA_CHECK_LAUNCH("sage quantize_rows_kernel");
  }
};
template <class Element, int kHeadDim>
struct VLaunch {
  static void run(const VQuantParams& p, cudaStream_t stream) {
    const int ctas = static_cast<int>(p.padded_keys / kVKeyPad);
    quantize_v_kernel<Element, kHeadDim><<<grid_of(ctas, p.heads, p.batch), kThreads, 0, stream>>>(p);
    ATTNSUITE_CUDA_CHECK_LAUNCH("sage quantize_v_kernel");
  }
};

template <class Element, int kHeadDim>
struct LseShiftLaunch {
  static void run(const LseShiftParams& p, cudaStream_t stream) {
    const int ctas = (p.seq_q + kLseRowsPerCta - 1) / kLseRowsPerCta;
    lse_shift_kernel<Element, kHeadDim><<<grid_of(ctas, p.heads_q, p.batch), kThreads, 0, stream>>>(p);
    ATTNSUITE_CUDA_CHECK_LAUNCH("sage lse_shift_kernel");
  }
};

}  // namespace

void launch_lse_shift(const LseShiftParams& params, DType dtype, void* stream) {
  if (params.lse == nullptr || params.batch == 0 || params.heads_q == 0 || params.seq_q == 0) return;
  dispatch<LseShiftLaunch>(params, dtype, params.head_dim, static_cast<cudaStream_t>(stream));
}

void launch_stats(const StatsParams& params, DType dtype, void* stream) {
  dispatch<StatsLaunch>(params, dtype, params.head_dim, static_cast<cudaStream_t>(stream));
}
void launch_quantize_rows(const QuantParams& params, DType dtype, void* stream) {
  ATTNSUITE_REQUIRE(params.block_rows > 0 && kQuantRowsPerCta % params.block_rows == 0,
                    fmt::format("sage: quantization block of {} rows; must divide {}", params.block_rows,
                                kQuantRowsPerCta));
  dispatch<RowsLaunch>(params, dtype, params.head_dim, static_cast<cudaStream_t>(stream));
}
void launch_quantize_v(const VQuantParams& params, DType dtype, void* stream) {
  dispatch<VLaunch>(params, dtype, params.head_dim, static_cast<cudaStream_t>(stream));
}

int binary_arch_on_current_device() {
  cudaFuncAttributes attributes{};
  ATTNSUITE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, probe_kernel));
  return attributes.binaryVersion;
}

}  // namespace attnsuite::cuda::sage
