// flash3-fp8's host entry: the per-tensor e4m3 quantization pre-pass (two small kernels) and the
// dispatch to the e4m3 attention kernel of the head dim.
//
// The pre-pass stands in for e4m3 inputs, which the harness cannot hold yet (DType has no 8-bit
// type; docs/kernels/flash3-fp8.md "Inputs" says why this route was taken): per tensor,
// amax = max |x| over the finite values (one pass), descale = amax / 448 (1 when amax = 0),
// x₈ = e4m3(x / descale) rounded to nearest even with saturation (a second pass), into dense
// BSHD copies in the workspace; ±Inf becomes NaN (e4m3 has no infinity; an Inf never turns into
// a finite value, nor changes the scale of the other elements). Both passes are memory-bound
// and timed as part of the backend's forward.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdint>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/flash3/fp8_launch.hpp"
#include "cuda/flash3/fp8_run_forward.cuh"

namespace attnsuite::cuda::flash3 {
namespace {

constexpr float kE4m3Max = 448.0f;
constexpr int kQuantizeThreads = 256;

// One bf16 operand (Q, K or V) and its dense e4m3 copy.
struct QuantizeOperand {
  const __nv_bfloat16* source = nullptr;
  std::uint8_t* destination = nullptr;
  std::int64_t batch_stride = 0, row_stride = 0, head_stride = 0;  // source, in elements
  int rows = 0, heads = 0;
};

struct QuantizeArgs {
  QuantizeOperand operands[3];  // q, k, v: blockIdx.y
  int batch = 0;
  int head_dim = 0;
  unsigned* amax_bits = nullptr;  // 3 words, zeroed before the amax pass (|x| as float bits)
  float* descales = nullptr;      // 3 floats, written by the quantize pass
};

__device__ __forceinline__ std::uint32_t chunk_count(const QuantizeOperand& op, int batch, int head_dim) {
  return static_cast<std::uint32_t>(static_cast<std::int64_t>(batch) * op.rows * op.heads * (head_dim / 8));
}

// The source address of 16-byte chunk `index` (8 elements) of an operand, in (b, s, h, chunk)
// order. 32-bit index arithmetic (the host checks that every operand has < 2^31 chunks): 64-bit
// divisions would make these memory-bound passes instruction-bound.
__device__ __forceinline__ const __nv_bfloat16* chunk_source(const QuantizeOperand& op, int head_dim,
                                                             std::uint32_t index, std::int64_t& dense_offset) {
  const std::uint32_t chunks = static_cast<std::uint32_t>(head_dim) / 8;  // 8 or 16
  const std::uint32_t chunk = index % chunks;
  std::uint32_t row = index / chunks;  // (b·rows + s)·heads + h
  dense_offset = static_cast<std::int64_t>(row) * head_dim + chunk * 8;
  const std::uint32_t h = row % static_cast<std::uint32_t>(op.heads);
  row /= static_cast<std::uint32_t>(op.heads);
  const std::uint32_t s = row % static_cast<std::uint32_t>(op.rows), b = row / static_cast<std::uint32_t>(op.rows);
  return op.source + b * op.batch_stride + s * op.row_stride + h * op.head_stride + chunk * 8;
}

__device__ __forceinline__ void unpack8(const uint4& raw, float (&x)[8]) {
  const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

// Calls visit(dense_offset, x) for each 16-byte chunk of an operand this thread takes (a grid-
// stride loop over chunk_count chunks): x the chunk's 8 values, dense_offset its e4m3 copy's.
template <class Visit>
__device__ __forceinline__ void for_each_chunk(const QuantizeOperand& op, const QuantizeArgs& args, Visit visit) {
  const std::uint32_t total = chunk_count(op, args.batch, args.head_dim);
  for (std::uint32_t index = blockIdx.x * blockDim.x + threadIdx.x; index < total; index += gridDim.x * blockDim.x) {
    std::int64_t dense_offset;
    const uint4 raw = *reinterpret_cast<const uint4*>(chunk_source(op, args.head_dim, index, dense_offset));
    float x[8];
    unpack8(raw, x);
    visit(dense_offset, x);
  }
}

__global__ void __launch_bounds__(kQuantizeThreads) amax_kernel(const __grid_constant__ QuantizeArgs args) {
  const QuantizeOperand& op = args.operands[blockIdx.y];
  float amax = 0.0f;
  for_each_chunk(op, args, [&](std::int64_t, float(&x)[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float magnitude = fabsf(x[i]);
      amax = fmaxf(amax, magnitude < INFINITY ? magnitude : 0.0f);  // finite values only (NaN, ±Inf: 0)
    }
  });
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  __shared__ float warp_max[kQuantizeThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kQuantizeThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    // Non-negative floats order like their bit patterns.
    atomicMax(&args.amax_bits[blockIdx.y], __float_as_uint(amax));
  }
}

__global__ void __launch_bounds__(kQuantizeThreads) quantize_kernel(const __grid_constant__ QuantizeArgs args) {
  const QuantizeOperand& op = args.operands[blockIdx.y];
  const float amax = __uint_as_float(args.amax_bits[blockIdx.y]);
  const bool scaled = amax > 0.0f;
  const float descale = scaled ? amax / kE4m3Max : 1.0f;
  const float inverse = scaled ? kE4m3Max / amax : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) args.descales[blockIdx.y] = descale;
  for_each_chunk(op, args, [&](std::int64_t dense_offset, float(&x)[8]) {
#pragma unroll
    // e4m3 has no infinity: ±Inf becomes NaN (never a finite value), NaN stays NaN.
    for (int i = 0; i < 8; ++i) x[i] = fabsf(x[i]) == INFINITY ? NAN : x[i];
    std::uint32_t packed[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      std::uint16_t low, high;
      // cvt puts its first source in the upper byte.
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n"
          : "=h"(low)
          : "f"(x[4 * half + 1] * inverse), "f"(x[4 * half] * inverse));
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n"
          : "=h"(high)
          : "f"(x[4 * half + 3] * inverse), "f"(x[4 * half + 2] * inverse));
      packed[half] = static_cast<std::uint32_t>(low) | static_cast<std::uint32_t>(high) << 16;
    }
    *reinterpret_cast<uint2*>(op.destination + dense_offset) = make_uint2(packed[0], packed[1]);
  });
}

constexpr std::size_t align_256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

struct WorkspaceLayout {
  std::size_t q = 0, k = 0, v = 0, words = 0, total = 0;  // offsets
};

WorkspaceLayout workspace_layout(const Params& params) {
  const std::size_t q_bytes = static_cast<std::size_t>(params.batch) * params.seq_q * params.heads_q * params.head_dim;
  const std::size_t kv_bytes =
      static_cast<std::size_t>(params.batch) * params.seq_kv * params.heads_kv * params.head_dim;
  WorkspaceLayout layout;
  layout.q = 0;
  layout.k = align_256(q_bytes);
  layout.v = layout.k + align_256(kv_bytes);
  layout.words = layout.v + align_256(kv_bytes);
  layout.total = layout.words + 256;  // amax bits [0, 16), descales [16, 32)
  return layout;
}

}  // namespace

std::size_t fp8_workspace_bytes(const Params& params) { return workspace_layout(params).total; }

void launch_forward_fp8(const Params& params, void* workspace, Fp8Order order, void* stream) {
  if (params.head_dim != 64 && params.head_dim != 128) {
    throw Error(ErrorKind::Unsupported,
                fmt::format("head dim {} not supported by flash3-fp8; allowed: 64, 128", params.head_dim));
  }
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  const WorkspaceLayout layout = workspace_layout(params);
  auto* base = static_cast<std::uint8_t*>(workspace);
  auto* amax_bits = reinterpret_cast<unsigned*>(base + layout.words);
  auto* descales = reinterpret_cast<float*>(base + layout.words + 16);

  QuantizeArgs args;
  args.batch = params.batch;
  args.head_dim = params.head_dim;
  args.amax_bits = amax_bits;
  args.descales = descales;
  auto set = [](QuantizeOperand& op, const void* source, std::uint8_t* destination, std::int64_t batch_stride,
                std::int64_t row_stride, std::int64_t head_stride, int rows, int heads) {
    op.source = static_cast<const __nv_bfloat16*>(source);
    op.destination = destination;
    op.batch_stride = batch_stride;
    op.row_stride = row_stride;
    op.head_stride = head_stride;
    op.rows = rows;
    op.heads = heads;
  };
  set(args.operands[0], params.q, base + layout.q, params.q_batch_stride, params.q_row_stride, params.q_head_stride,
      params.seq_q, params.heads_q);
  set(args.operands[1], params.k, base + layout.k, params.k_batch_stride, params.k_row_stride, params.k_head_stride,
      params.seq_kv, params.heads_kv);
  set(args.operands[2], params.v, base + layout.v, params.v_batch_stride, params.v_row_stride, params.v_head_stride,
      params.seq_kv, params.heads_kv);

  for (const QuantizeOperand& op : args.operands) {
    const std::int64_t chunks = static_cast<std::int64_t>(params.batch) * op.rows * op.heads * (params.head_dim / 8);
    if (chunks >= (std::int64_t{1} << 31)) {
      throw Error(ErrorKind::Unsupported,
                  fmt::format("flash3-fp8: a tensor of {} 16-byte chunks is too large for the quantization pre-pass; "
                              "at most 2^31 - 1",
                              chunks));
    }
  }
  // Enough blocks to fill the GPU with memory traffic (the loops are grid-strided; index +
  // grid size stays below 2^32 since chunks < 2^31).
  int device = 0, sms = 0;
  ATTNSUITE_CUDA_CHECK(cudaGetDevice(&device));
  ATTNSUITE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const dim3 grid(static_cast<unsigned>(4 * sms), 3);
  ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, 16, cuda_stream));
  amax_kernel<<<grid, kQuantizeThreads, 0, cuda_stream>>>(args);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3-fp8 amax_kernel");
  quantize_kernel<<<grid, kQuantizeThreads, 0, cuda_stream>>>(args);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3-fp8 quantize_kernel");

  // The kernel reads the dense e4m3 copies (BSHD, strides in bytes = elements).
  Params fp8 = params;
  fp8.q = base + layout.q;
  fp8.k = base + layout.k;
  fp8.v = base + layout.v;
  fp8.q_head_stride = params.head_dim;
  fp8.q_row_stride = static_cast<std::int64_t>(params.heads_q) * params.head_dim;
  fp8.q_batch_stride = fp8.q_row_stride * params.seq_q;
  fp8.k_head_stride = fp8.v_head_stride = params.head_dim;
  fp8.k_row_stride = fp8.v_row_stride = static_cast<std::int64_t>(params.heads_kv) * params.head_dim;
  fp8.k_batch_stride = fp8.v_batch_stride = fp8.k_row_stride * params.seq_kv;
  run_fp8_ordered(fp8, descales, order, cuda_stream);
}

}  // namespace attnsuite::cuda::flash3
