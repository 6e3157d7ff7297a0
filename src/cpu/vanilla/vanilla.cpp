// `cpu-vanilla`: the "vanilla PyTorch" baseline on the CPU. Like torch's math SDPA it processes
// every (batch, head) at once: S = scale·Q·Kᵀ for all B·Hq heads into one materialized fp32
// buffer of B·Hq·Nq·Nk scores (OpenBLAS sgemm, OpenBLAS's own threads), then a masked,
// vectorized row softmax in place (threaded over rows, as torch's softmax is), then O = P·V
// (sgemm). Its extra memory is O(N²·B·H), which is what cpu-flash is measured against.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "attnsuite/error.hpp"
#include "attnsuite/memory.hpp"
#include "core/cancel.hpp"
#include "cpu/backward.hpp"
#include "cpu/common.hpp"
#include "cpu/simd_math.hpp"

namespace attnsuite::cpu {
namespace {

// Softmax of row[begin, end) in place, zeros outside; returns the natural-log LSE (-inf when
// the range is empty, and then the whole row is 0).
float masked_softmax_row(float* row, std::int64_t length, std::int64_t begin, std::int64_t end) {
  std::fill(row, row + begin, 0.0f);
  std::fill(row + std::max(begin, end), row + length, 0.0f);
  if (begin >= end) return -std::numeric_limits<float>::infinity();
  float* values = row + begin;
  const std::int64_t count = end - begin;
  std::int64_t j = 0;
  __m256 max_vec = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (; j + 8 <= count; j += 8) max_vec = _mm256_max_ps(max_vec, _mm256_loadu_ps(values + j));
  float row_max = simd::reduce_max(max_vec);
  for (; j < count; ++j) row_max = std::max(row_max, values[j]);

  const __m256 max_broadcast = _mm256_set1_ps(row_max);
  __m256 sum_vec = _mm256_setzero_ps();
  for (j = 0; j + 8 <= count; j += 8) {
    const __m256 p = simd::exp_ps(_mm256_sub_ps(_mm256_loadu_ps(values + j), max_broadcast));
    _mm256_storeu_ps(values + j, p);
    sum_vec = _mm256_add_ps(sum_vec, p);
  }
  float row_sum = simd::reduce_add(sum_vec);
  for (; j < count; ++j) {
    values[j] = std::exp(values[j] - row_max);
    row_sum += values[j];
  }
  const __m256 inverse = _mm256_set1_ps(1.0f / row_sum);
  for (j = 0; j + 8 <= count; j += 8) _mm256_storeu_ps(values + j, _mm256_mul_ps(_mm256_loadu_ps(values + j), inverse));
  for (; j < count; ++j) values[j] *= 1.0f / row_sum;
  return row_max + std::log(row_sum);
}

class VanillaBackend final : public CpuBackend {
 public:
  VanillaBackend()
      : CpuBackend("cpu-vanilla", "vanilla attention (attnsuite, OpenBLAS)",
                   "fp32 (and e4m3 in, dequantized to fp32, bf16 out: forward only), materializes "
                   "B·H·Nq·Nk scores, causal, window, GQA/MQA, head dim 32..256") {}

  Support supports(const AttentionProblem& problem) const override {
    if (problem.dtype != DType::F32 && problem.dtype != DType::E4M3) {
      return Support::no(
          fmt::format("dtype {} not supported; allowed: fp32, e4m3 (cpu-vanilla is the fp32 BLAS baseline; "
                      "cpu-flash and reference take fp16/bf16)",
                      to_string(problem.dtype)));
    }
    return supports_common(problem, /*takes_e4m3=*/true);
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    return configless_plan(
        *this, problem, options, [this, problem](const AttentionArgs& args, Stream, RunReport&) { run(problem, args); },
        [problem](const BackwardArgs& args, Stream, RunReport&) { vanilla_backward(problem, args, cpu_threads()); });
  }

 private:
  void run(const AttentionProblem& problem, const AttentionArgs& args) const {
    check_args(name(), problem, args, /*contiguous_last_dim=*/true);
    if (problem.dtype == DType::E4M3) return run_e4m3(problem, args);
    run_f32(problem, args);
  }

  // e4m3: Q, K, V dequantized (e4m3 × descale) into dense fp32 copies, the fp32 path on them,
  // O rounded once to bf16: the fp32 baseline of the same real inputs.
  void run_e4m3(const AttentionProblem& problem, const AttentionArgs& args) const {
    AttentionProblem f32 = problem;
    f32.dtype = DType::F32;
    f32.layout = Layout::BSHD;
    std::vector<HostBuffer> buffers;
    buffers.reserve(4);
    auto dense_f32 = [&](const TensorView& view) {
      TensorView out;
      out.dtype = DType::F32;
      out.shape = view.shape;
      out.strides = TensorView::dense_strides(view.shape, Layout::BSHD);
      buffers.emplace_back(static_cast<std::size_t>(view.numel()) * sizeof(float));
      out.data = buffers.back().data();
      return out;
    };
    AttentionArgs dense = args;
    dense.q = dense_f32(args.q);
    dense.k = dense_f32(args.k);
    dense.v = dense_f32(args.v);
    dense.o = dense_f32(args.o);
    // A pair, not a structured binding: clang (the sanitizer build) does not let a lambda capture one.
    for (const auto& pair :
         {std::pair{&args.q, &dense.q}, std::pair{&args.k, &dense.k}, std::pair{&args.v, &dense.v}}) {
      const TensorView* from = pair.first;
      auto* out = static_cast<float*>(pair.second->data);
      const auto rows = from->shape[0] * from->shape[1] * from->shape[2];
      parallel_for(rows, cpu_threads(), [&](std::int64_t row, int) {
        const std::int64_t s = row / from->shape[2] % from->shape[1], h = row % from->shape[2];
        const std::int64_t b = row / (from->shape[2] * from->shape[1]);
        for (std::int64_t d = 0; d < from->shape[3]; ++d)
          out[row * from->shape[3] + d] = from->load(from->offset(b, s, h, d));
      });
    }
    run_f32(f32, dense);
    const auto* o = static_cast<const float*>(dense.o.data);
    const std::int64_t dim_v = args.o.shape[3];
    auto* o_base = static_cast<unsigned char*>(args.o.data);
    const auto element = static_cast<std::int64_t>(size_of(args.o.dtype));
    for (std::int64_t b = 0; b < args.o.shape[0]; ++b)
      for (std::int64_t s = 0; s < args.o.shape[1]; ++s)
        for (std::int64_t h = 0; h < args.o.shape[2]; ++h)
          convert_from_float(o + dense.o.offset(b, s, h, 0), o_base + args.o.offset(b, s, h, 0) * element, args.o.dtype,
                             static_cast<std::size_t>(dim_v));
  }

  void run_f32(const AttentionProblem& problem, const AttentionArgs& args) const {
    const std::int64_t heads = static_cast<std::int64_t>(problem.batch) * problem.heads_q;
    const std::int64_t seq_q = problem.seq_q, seq_kv = problem.seq_kv;
    const int head_dim = problem.head_dim, dim_v = problem.dim_v();
    const std::int64_t head_scores = seq_q * seq_kv;
    HostBuffer scores(static_cast<std::size_t>(heads * head_scores) * sizeof(float));
    float* all_scores = scores.as<float>();

    const auto* q = static_cast<const float*>(args.q.data);
    const auto* k = static_cast<const float*>(args.k.data);
    const auto* v = static_cast<const float*>(args.v.data);
    auto* o = static_cast<float*>(args.o.data);
    auto head_origin = [&](const TensorView& view, std::int64_t head_item, bool kv) {
      const std::int64_t b = head_item / problem.heads_q;
      const std::int64_t h = head_item % problem.heads_q;
      return view.offset(b, 0, kv ? problem.kv_head_of(static_cast<int>(h)) : h, 0);
    };

    // One head's GEMM at N = 8k is 8.6 GFLOP: a cancellation point per head (core/cancel.hpp).
    for (std::int64_t item = 0; item < heads; ++item) {
      throw_if_cancelled();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(seq_q), static_cast<int>(seq_kv), head_dim,
                  problem.softmax_scale(), q + head_origin(args.q, item, false), static_cast<int>(args.q.strides[1]),
                  k + head_origin(args.k, item, true), static_cast<int>(args.k.strides[1]), 0.0f,
                  all_scores + item * head_scores, static_cast<int>(seq_kv));
    }

    // Rows in chunks so each thread takes a few hundred KiB of scores at a time.
    const std::int64_t rows = heads * seq_q;
    const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, 65536 / seq_kv);
    parallel_for((rows + rows_per_chunk - 1) / rows_per_chunk, cpu_threads(), [&](std::int64_t chunk, int) {
      const std::int64_t first = chunk * rows_per_chunk;
      const std::int64_t last = std::min(rows, first + rows_per_chunk);
      for (std::int64_t row = first; row < last; ++row) {
        const std::int64_t i = row % seq_q;
        const float lse =
            masked_softmax_row(all_scores + row * seq_kv, seq_kv, problem.key_begin(i), problem.key_end(i));
        if (!args.lse.empty()) args.lse.data[row] = lse;  // (batch, heads, seq_q) dense == row
      }
    });

    for (std::int64_t item = 0; item < heads; ++item) {
      throw_if_cancelled();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(seq_q), dim_v, static_cast<int>(seq_kv),
                  1.0f, all_scores + item * head_scores, static_cast<int>(seq_kv), v + head_origin(args.v, item, true),
                  static_cast<int>(args.v.strides[1]), 0.0f, o + head_origin(args.o, item, false),
                  static_cast<int>(args.o.strides[1]));
    }
    // Rows that see no key are O = 0 exactly: P·V gave 0·V there, which is NaN where V holds a
    // NaN or Inf. Only masks with seq_q > seq_kv or a window leave such rows.
    for (std::int64_t i = 0; i < seq_q; ++i) {
      if (problem.key_begin(i) < problem.key_end(i)) continue;
      for (std::int64_t item = 0; item < heads; ++item) {
        float* row = o + head_origin(args.o, item, false) + i * args.o.strides[1];
        std::fill(row, row + dim_v, 0.0f);
      }
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_vanilla_backend() { return std::make_unique<VanillaBackend>(); }

}  // namespace attnsuite::cpu
