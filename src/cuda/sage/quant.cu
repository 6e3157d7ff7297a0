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

#include <algorithm>
#include <cstdint>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/sage/launch.hpp"
#include "cuda/sage/quant_rule.hpp"

namespace attnsuite::cuda::sage {
namespace {

constexpr int kThreads = 256;

// The 8 elements of a 16-byte chunk as floats; load_8 reads the chunk first.
template <class Element>
__device__ __forceinline__ void unpack_8(const uint4& raw, float (&out)[8]) {
  const Element* e = reinterpret_cast<const Element*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) out[j] = static_cast<float>(e[j]);
}
template <class Element>
__device__ __forceinline__ void load_8(const Element* src, float (&out)[8]) {
  unpack_8<Element>(*reinterpret_cast<const uint4*>(src), out);
}

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) stats_kernel(const StatsParams p) {
  constexpr int kChunks = kHeadDim / 8;           // threads per row
  constexpr int kRowGroups = kThreads / kChunks;  // rows read at once
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

// The channel means of smooth-K for one (batch, kv head): the stats kernel's partial sums added
// in split order (the order the host reference uses), / seq. 8 partials are
// loaded before they are added, so the loop is not one L2 round trip per split.
template <int kHeadDim>
__device__ __forceinline__ void channel_means(const float* partials, int splits, int seq, float* mean) {
  for (int c = static_cast<int>(threadIdx.x); c < kHeadDim; c += kThreads) {
    const float* partial = partials + c;
    float s = 0.0f;
    int split = 0;
    for (; split + 8 <= splits; split += 8) {
      float batch[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) batch[u] = partial[(split + u) * kHeadDim];
#pragma unroll
      for (int u = 0; u < 8; ++u) s += batch[u];
    }
    for (; split < splits; ++split) s += partial[split * kHeadDim];
    mean[c] = s / static_cast<float>(seq);
  }
}

// v2 (2026-12-04, 4th session): the H200's ncu timing of v1 gave 72–77 µs per pass for 67 MB
// read + 33 MB written (1.3 TB/s): every thread held its 8 chunks as 64 floats (2 CTAs per SM,
// each one load phase then one store phase, little in flight), rows' maxima went through
// same-address shared atomics, and K's CTAs summed the mean's partials (one L2 round trip per
// split) before loading anything. Now the chunks stay packed (4 registers each) and are loaded
// first, the mean is summed while they arrive, and a row's maximum is a shuffle reduction over
// the kChunks consecutive lanes that hold it. At least 3 CTAs per SM (≤ 80 registers; ptxas
// gave 108 without the bound at d128, i.e. 2 CTAs, and spilled at 4 CTAs' 64). Q's pass also
// writes smooth-K's LSE shift per row (QuantParams::lse_shift), k̄ summed as the K pass sums it.
// CTA `cta` of (head, batch) of a rows pass over p (quantize_rows_kernel, and
// quantize_q_and_k_kernel for Q's and K's CTAs).
template <class Element, int kHeadDim>
__device__ __forceinline__ void quantize_rows(const QuantParams& p, int cta, int head, int batch) {
  constexpr int kChunks = kHeadDim / 8;  // consecutive lanes per row
  constexpr int kPerThread = kQuantRowsPerCta * kChunks / kThreads;
  static_assert(kPerThread * kThreads == kQuantRowsPerCta * kChunks, "chunks divide among the threads");
  static_assert(kThreads % kChunks == 0 && 32 % kChunks == 0, "a thread keeps its chunk; a row is within a warp");
  __shared__ float mean[kHeadDim];
  __shared__ float k_mean[kHeadDim];  // Q with lse_shift: k̄ of the q head's kv head
  __shared__ std::uint32_t row_amax[kQuantRowsPerCta];
  __shared__ float block_inverse[kQuantRowsPerCta];
  const int row_begin = cta * kQuantRowsPerCta;
  const std::int64_t slice = static_cast<std::int64_t>(batch) * p.heads + head;
  const int chunk = static_cast<int>(threadIdx.x) % kChunks;  // the same for every i
  const auto* x = static_cast<const Element*>(p.x) + batch * p.batch_stride + head * p.head_stride + chunk * 8;

  uint4 raw[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int row = row_begin + (i * kThreads + static_cast<int>(threadIdx.x)) / kChunks;
    raw[i] = row < p.seq ? *reinterpret_cast<const uint4*>(x + row * p.row_stride) : make_uint4(0, 0, 0, 0);
  }
  if (p.mean_partials != nullptr) {
    channel_means<kHeadDim>(p.mean_partials + slice * p.splits * kHeadDim, p.splits, p.seq, mean);
  } else {
    for (int c = static_cast<int>(threadIdx.x); c < kHeadDim; c += kThreads) mean[c] = 0.0f;
  }
  if (p.lse_shift != nullptr) {
    const std::int64_t kv_slice = static_cast<std::int64_t>(batch) * (p.heads / p.group_size) + head / p.group_size;
    channel_means<kHeadDim>(p.k_sum + kv_slice * p.splits * kHeadDim, p.splits, p.seq_kv, k_mean);
  }
  __syncthreads();
  float my_mean[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) my_mean[j] = mean[chunk * 8 + j];
  // Rows past the end of the input are zeros: their maximum is 0 (they are never written).
  const auto centered = [&](int i, float(&v)[8]) {
    unpack_8<Element>(raw[i], v);
    const int row = row_begin + (i * kThreads + static_cast<int>(threadIdx.x)) / kChunks;
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = row < p.seq ? v[j] - my_mean[j] : 0.0f;
  };
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    float v[8];
    centered(i, v);
    std::uint32_t amax = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = max(amax, abs_bits(v[j]));
#pragma unroll
    for (int offset = kChunks / 2; offset > 0; offset /= 2)
      amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if (chunk == 0) row_amax[(i * kThreads + static_cast<int>(threadIdx.x)) / kChunks] = amax;
    if (p.lse_shift != nullptr) {
      // Q has no mean of its own: v is the row as given (0 past the end).
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) dot += v[j] * k_mean[chunk * 8 + j];
#pragma unroll
      for (int offset = kChunks / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      const int row = row_begin + (i * kThreads + static_cast<int>(threadIdx.x)) / kChunks;
      if (chunk == 0 && row < p.seq) p.lse_shift[slice * p.seq + row] = p.shift_scale * dot;
    }
  }
  __syncthreads();
  // The CTA's scale blocks (quant_rule.hpp): consecutive rows, or sage2's key groups.
  const CtaBlocks layout = cta_blocks(p.key_groups, p.block_rows);
  for (int b = static_cast<int>(threadIdx.x); b < layout.blocks(); b += kThreads) {
    std::uint32_t bits = 0;
    for (int i = 0; i < layout.rows_per_block(); ++i) bits = max(bits, row_amax[layout.row(b, i)]);
    const float amax = bits_float(bits);
    block_inverse[b] = int8_inverse_scale(amax);
    const int global_block = row_begin / kQuantRowsPerCta * layout.blocks() + b;
    if (global_block < p.blocks) p.scale[slice * p.blocks + global_block] = amax / kInt8Max * p.scale_multiplier;
  }
  __syncthreads();
  std::int8_t* out = p.out + slice * p.seq * kHeadDim + chunk * 8;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int r = (i * kThreads + static_cast<int>(threadIdx.x)) / kChunks, row = row_begin + r;
    if (row >= p.seq) continue;
    float v[8];
    centered(i, v);
    const float inverse = block_inverse[layout.block_of(r)];
    std::uint32_t packed[2];
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      std::uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        word |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(quantize_int8(v[4 * w + j], inverse))) << (8 * j);
      packed[w] = word;
    }
    *reinterpret_cast<uint2*>(out + static_cast<std::int64_t>(row) * kHeadDim) = make_uint2(packed[0], packed[1]);
  }
}

template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads, 3) quantize_rows_kernel(const QuantParams p) {
  quantize_rows<Element, kHeadDim>(p, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
                                   static_cast<int>(blockIdx.z));
}

// Q's and K's rows passes in one launch (sage's option quant_qk=fused, opt-in: 0.99-1.00x the time
// of the two launches, H100 d128 N 4096, within the noise): CTAs 0 .. q_ctas - 1 of x quantize Q,
// the rest K; y covers the larger head count (a CTA past its tensor's heads does nothing). Neither
// pass reads the other's output, so they share the GPU instead of K's CTAs waiting for Q's last
// ones (the two passes measured 2 × 50.4 µs of a 950 µs forward, sage d128 N 4096, H200).
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads, 3)
    quantize_q_and_k_kernel(const QuantParams q, const QuantParams k, int q_ctas) {
  const int x = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y), batch = static_cast<int>(blockIdx.z);
  if (x < q_ctas) {
    if (head < q.heads) quantize_rows<Element, kHeadDim>(q, x, head, batch);
  } else if (head < k.heads) {
    quantize_rows<Element, kHeadDim>(k, x - q_ctas, head, batch);
  }
}

// v2 (same session and reason as quantize_rows_kernel's): v1 wrote the transposed tile byte by
// byte with each lane owning 8 channels, so the 16 lanes of a key hit one shared-memory bank
// (channel stride 8 rows × 64 bytes): 94–100 µs per pass on the H200 for 67 MB in + 33 MB out.
// Now a thread owns the four keys that share one 32-bit word of the permuted Vᵀ row
// (v_key_position: keys 2c, 2c+1, 2c+8, 2c+9 of a 16-key group are bytes 0..3 of word c) for
// 8 channels, writes whole words, and the word index is XOR-swizzled by the channel's chunk so
// that the lanes of a warp fall on different banks.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(kThreads) quantize_v_kernel(const VQuantParams p) {
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kKeys = kVKeyPad;                     // keys per CTA
  constexpr int kWords = kKeys / 4;                   // 32-bit words per transposed row
  constexpr int kTasks = (kKeys / 16) * 4 * kChunks;  // (16-key group, word in the group, chunk)
  static_assert(kWords == 16 && kChunks <= 16, "the XOR swizzle permutes a row's 16 words by the chunk");
  __shared__ float inverse[kHeadDim];
  __shared__ std::uint32_t tile[kHeadDim][kWords];
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
  for (int task = static_cast<int>(threadIdx.x); task < kTasks; task += kThreads) {
    const int chunk = task % kChunks, word = (task / kChunks) % 4, group = task / (4 * kChunks);
    // Byte b of the word holds key 16·group + {2w, 2w+1, 2w+8, 2w+9}[b] (v_key_position).
    float values[4][8];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int key = key_begin + 16 * group + 2 * word + (b % 2) + 8 * (b / 2);
      if (key < p.seq) {
        load_8(v + key * p.row_stride + chunk * 8, values[b]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) values[b][j] = 0.0f;  // padding keys stay 0 (P is 0 there; 0·NaN would not be)
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = chunk * 8 + j;
      const float scale = inverse[c];
      std::uint32_t packed = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        packed |= static_cast<std::uint32_t>(__nv_cvt_float_to_fp8(values[b][j] * scale, __NV_SATFINITE, __NV_E4M3))
                  << (8 * b);
      tile[c][(4 * group + word) ^ chunk] = packed;
    }
  }
  __syncthreads();
  std::uint8_t* vt = p.vt + slice * kHeadDim * p.padded_keys + key_begin;
  for (int index = static_cast<int>(threadIdx.x); index < kHeadDim * (kKeys / 16); index += kThreads) {
    const int c = index / (kKeys / 16), part = index % (kKeys / 16), swizzle = c / 8;
    const uint4 out = make_uint4(tile[c][(4 * part) ^ swizzle], tile[c][(4 * part + 1) ^ swizzle],
                                 tile[c][(4 * part + 2) ^ swizzle], tile[c][(4 * part + 3) ^ swizzle]);
    *reinterpret_cast<uint4*>(vt + c * p.padded_keys + part * 16) = out;
  }
}

__global__ void probe_kernel() {}

template <template <class, int> class Launch, class Params>
void dispatch(const Params& params, DType dtype, int head_dim, cudaStream_t stream) {
  const auto by_dim = [&](auto element) {
    using Element = decltype(element);
    switch (head_dim) {
      case 64:
        return Launch<Element, 64>::run(params, stream);
      case 128:
        return Launch<Element, 128>::run(params, stream);
      default:
        throw Error(ErrorKind::Unsupported,
                    fmt::format("head dim {} not supported by the sage quantizers; allowed: 64, 128", head_dim));
    }
  };
  switch (dtype) {
    case DType::F16:
      return by_dim(__half{});
    case DType::BF16:
      return by_dim(__nv_bfloat16{});
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
// A rows pass's CTAs along x: kQuantRowsPerCta rows each.
int rows_ctas(const QuantParams& p) { return (p.seq + kQuantRowsPerCta - 1) / kQuantRowsPerCta; }

// A rows pass's scale blocks must tile a CTA's rows (or be sage2's key groups).
void check_block_rows(const QuantParams& p) {
  ATTNSUITE_REQUIRE(p.key_groups || (p.block_rows > 0 && kQuantRowsPerCta % p.block_rows == 0),
                    fmt::format("sage: quantization block of {} rows; must divide {} (a power of two)", p.block_rows,
                                kQuantRowsPerCta));
}

template <class Element, int kHeadDim>
struct RowsLaunch {
  static void run(const QuantParams& p, cudaStream_t stream) {
    const int ctas = rows_ctas(p);
    quantize_rows_kernel<Element, kHeadDim><<<grid_of(ctas, p.heads, p.batch), kThreads, 0, stream>>>(p);
    ATTNSUITE_CUDA_CHECK_LAUNCH("sage quantize_rows_kernel");
  }
};
// Q's and K's passes together: the dispatcher's Params.
struct QAndKParams {
  QuantParams q, k;
};
template <class Element, int kHeadDim>
struct QAndKLaunch {
  static void run(const QAndKParams& p, cudaStream_t stream) {
    const int q_ctas = rows_ctas(p.q), k_ctas = rows_ctas(p.k);
    quantize_q_and_k_kernel<Element, kHeadDim>
        <<<grid_of(q_ctas + k_ctas, std::max(p.q.heads, p.k.heads), p.q.batch), kThreads, 0, stream>>>(p.q, p.k,
                                                                                                       q_ctas);
    ATTNSUITE_CUDA_CHECK_LAUNCH("sage quantize_q_and_k_kernel");
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

}  // namespace

void launch_stats(const StatsParams& params, DType dtype, void* stream) {
  dispatch<StatsLaunch>(params, dtype, params.head_dim, static_cast<cudaStream_t>(stream));
}
void launch_quantize_rows(const QuantParams& params, DType dtype, void* stream) {
  check_block_rows(params);
  dispatch<RowsLaunch>(params, dtype, params.head_dim, static_cast<cudaStream_t>(stream));
}
void launch_quantize_q_and_k(const QuantParams& q, const QuantParams& k, DType dtype, void* stream) {
  check_block_rows(q);
  check_block_rows(k);
  ATTNSUITE_REQUIRE(q.head_dim == k.head_dim && q.batch == k.batch, "sage: Q and K of one problem");
  dispatch<QAndKLaunch>(QAndKParams{q, k}, dtype, q.head_dim, static_cast<cudaStream_t>(stream));
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
