// `cpu-vanilla` backward: the materialized baseline, as PyTorch's math backward computes it, one
// (batch, q head) at a time with two seq_q × seq_kv fp32 buffers (P, and dP turned into dS in
// place) and OpenBLAS sgemm for the five products:
//   S = scale·Q·Kᵀ → P = exp(S − LSE) (masked to 0)    dV (+)= Pᵀ·dO
//   dP = dO·Vᵀ → dS = P∘(dP − D), D = rowsum(dO∘O)     dQ = scale·dS·K    dK (+)= scale·dSᵀ·Q
// fp32 views are used in place (the GEMMs take their row stride; GQA accumulates dK/dV with
// beta = 1 over the group's q heads); 16-bit operands are converted to fp32 copies per head and
// the gradients converted back once.
#include "cpu/backward.hpp"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attnsuite/error.hpp"
#include "attnsuite/memory.hpp"
#include "cpu/common.hpp"
#include "cpu/simd_math.hpp"

namespace attnsuite::cpu {
namespace {

// An fp32 row-major matrix: rows `ld` floats apart.
struct Matrix {
  float* data = nullptr;
  int ld = 0;
  float* row(std::int64_t r) const { return data + r * ld; }
};

// Rows of one (batch, head) of a view as an fp32 matrix: the view itself when it is fp32, else
// `staging` (rows × cols, dense), filled from the view when `load`.
Matrix operand(const TensorView& view, std::int64_t b, std::int64_t h, std::int64_t rows, std::int64_t cols,
               float* staging, bool load) {
  if (view.dtype == DType::F32)
    return {static_cast<float*>(view.data) + view.offset(b, 0, h, 0), static_cast<int>(view.strides[1])};
  if (load) {
    const auto* base = static_cast<const char*>(view.data);
    for (std::int64_t r = 0; r < rows; ++r)
      convert_to_float(base + view.offset(b, r, h, 0) * static_cast<std::int64_t>(size_of(view.dtype)), view.dtype,
                       staging + r * cols, static_cast<std::size_t>(cols));
  }
  return {staging, static_cast<int>(cols)};
}

// Writes a staged fp32 matrix back into a 16-bit view (nothing to do for fp32 views).
void store(const Matrix& m, const TensorView& view, std::int64_t b, std::int64_t h, std::int64_t rows,
           std::int64_t cols) {
  if (view.dtype == DType::F32) return;
  auto* base = static_cast<char*>(view.data);
  for (std::int64_t r = 0; r < rows; ++r)
    convert_from_float(m.row(r), base + view.offset(b, r, h, 0) * static_cast<std::int64_t>(size_of(view.dtype)),
                       view.dtype, static_cast<std::size_t>(cols));
}

// out[j] = exp(s[j] − lse) over [0, count).
void exp_shifted(float* s, std::int64_t count, float lse) {
  const __m256 shift = _mm256_set1_ps(lse);
  std::int64_t j = 0;
  for (; j + 8 <= count; j += 8) _mm256_storeu_ps(s + j, simd::exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), shift)));
  for (; j < count; ++j) s[j] = std::exp(s[j] - lse);
}

// dp[j] = p[j]·(dp[j] − row_dot) over [0, count).
void grad_scores(const float* p, float* dp, std::int64_t count, float row_dot) {
  const __m256 shift = _mm256_set1_ps(row_dot);
  std::int64_t j = 0;
  for (; j + 8 <= count; j += 8)
    _mm256_storeu_ps(dp + j, _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_sub_ps(_mm256_loadu_ps(dp + j), shift)));
  for (; j < count; ++j) dp[j] = p[j] * (dp[j] - row_dot);
}

float dot(const float* a, const float* b, std::int64_t count) {
  __m256 acc = _mm256_setzero_ps();
  std::int64_t c = 0;
  for (; c + 8 <= count; c += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + c), _mm256_loadu_ps(b + c), acc);
  float sum = simd::reduce_add(acc);
  for (; c < count; ++c) sum += a[c] * b[c];
  return sum;
}

}  // namespace

void vanilla_backward(const AttentionProblem& problem, const BackwardArgs& args, int threads) {
  const Support support = supports_common(problem);
  ATTNSUITE_CHECK(support.ok, ErrorKind::Unsupported, "cpu-vanilla: " + support.reason);
  check_backward_args("cpu-vanilla", problem, args, /*contiguous_last_dim=*/true);
  const std::int64_t seq_q = problem.seq_q, seq_kv = problem.seq_kv;
  const std::int64_t head_dim = problem.head_dim, dim_v = problem.dim_v();
  const int nq = static_cast<int>(seq_q), nk = static_cast<int>(seq_kv);
  const int d = static_cast<int>(head_dim), dv = static_cast<int>(dim_v);
  const int group = problem.group_size();
  const float scale = problem.softmax_scale();

  HostBuffer scores(static_cast<std::size_t>(2 * seq_q * seq_kv + seq_q) * sizeof(float));
  float* probs = scores.as<float>();        // S, then P
  float* grads = probs + seq_q * seq_kv;    // dP, then dS
  float* row_dot = grads + seq_q * seq_kv;  // D
  // 16-bit: fp32 copies of one head's operands and its gradients.
  HostBuffer staging;
  float *q_f = nullptr, *o_f = nullptr, *do_f = nullptr, *k_f = nullptr, *v_f = nullptr, *dq_f = nullptr,
        *dk_f = nullptr, *dv_f = nullptr;
  if (problem.dtype != DType::F32) {
    const std::int64_t q_side = seq_q * (2 * head_dim + 2 * dim_v);
    const std::int64_t kv_side = seq_kv * (2 * head_dim + 2 * dim_v);
    staging = HostBuffer(static_cast<std::size_t>(q_side + kv_side) * sizeof(float));
    q_f = staging.as<float>();
    dq_f = q_f + seq_q * head_dim;
    o_f = dq_f + seq_q * head_dim;
    do_f = o_f + seq_q * dim_v;
    k_f = do_f + seq_q * dim_v;
    dk_f = k_f + seq_kv * head_dim;
    v_f = dk_f + seq_kv * head_dim;
    dv_f = v_f + seq_kv * dim_v;
  }

  // Rows in chunks so each thread takes a few hundred KiB of scores at a time.
  const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, 65536 / seq_kv);
  const std::int64_t chunks = (seq_q + rows_per_chunk - 1) / rows_per_chunk;
  auto for_rows = [&](auto&& body) {
    parallel_for(chunks, threads, [&](std::int64_t chunk, int) {
      const std::int64_t last = std::min(seq_q, (chunk + 1) * rows_per_chunk);
      for (std::int64_t i = chunk * rows_per_chunk; i < last; ++i) body(i);
    });
  };

  for (std::int64_t b = 0; b < problem.batch; ++b) {
    for (std::int64_t g = 0; g < problem.heads_kv; ++g) {
      const Matrix k = operand(args.k, b, g, seq_kv, head_dim, k_f, true);
      const Matrix v = operand(args.v, b, g, seq_kv, dim_v, v_f, true);
      const Matrix dk = operand(args.dk, b, g, seq_kv, head_dim, dk_f, false);
      const Matrix dvm = operand(args.dv, b, g, seq_kv, dim_v, dv_f, false);
      for (int member = 0; member < group; ++member) {
        const std::int64_t h = g * group + member;
        const Matrix q = operand(args.q, b, h, seq_q, head_dim, q_f, true);
        const Matrix o = operand(args.o, b, h, seq_q, dim_v, o_f, true);
        const Matrix d_o = operand(args.d_o, b, h, seq_q, dim_v, do_f, true);
        const Matrix dq = operand(args.dq, b, h, seq_q, head_dim, dq_f, false);
        const float* lse = args.lse.data + (b * problem.heads_q + h) * seq_q;
        const float beta = member == 0 ? 0.0f : 1.0f;  // GQA: dK, dV summed over the group

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, d, scale, q.data, q.ld, k.data, k.ld, 0.0f, probs,
                    nk);
        for_rows([&](std::int64_t i) {
          float* row = probs + i * seq_kv;
          const std::int64_t begin = problem.key_begin(i), end = std::max(begin, problem.key_end(i));
          std::fill(row, row + begin, 0.0f);
          std::fill(row + end, row + seq_kv, 0.0f);
          exp_shifted(row + begin, end - begin, lse[i]);
          row_dot[i] = dot(d_o.row(i), o.row(i), dim_v);
        });
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, dv, nq, 1.0f, probs, nk, d_o.data, d_o.ld, beta,
                    dvm.data, dvm.ld);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, dv, 1.0f, d_o.data, d_o.ld, v.data, v.ld, 0.0f,
                    grads, nk);
        // dS is set to 0 at hidden pairs, not multiplied: dP there is NaN where V holds a NaN.
        for_rows([&](std::int64_t i) {
          float* row = grads + i * seq_kv;
          const std::int64_t begin = problem.key_begin(i), end = std::max(begin, problem.key_end(i));
          std::fill(row, row + begin, 0.0f);
          std::fill(row + end, row + seq_kv, 0.0f);
          grad_scores(probs + i * seq_kv + begin, row + begin, end - begin, row_dot[i]);
        });
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, d, nk, scale, grads, nk, k.data, k.ld, 0.0f, dq.data,
                    dq.ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, d, nq, scale, grads, nk, q.data, q.ld, beta, dk.data,
                    dk.ld);
        // Rows that see no key: dQ = 0 exactly (the GEMM gave 0·K, NaN where K holds one).
        for (std::int64_t i = 0; i < seq_q; ++i)
          if (problem.key_begin(i) >= problem.key_end(i)) std::fill(dq.row(i), dq.row(i) + head_dim, 0.0f);
        store(dq, args.dq, b, h, seq_q, head_dim);
      }
      store(dk, args.dk, b, g, seq_kv, head_dim);
      store(dvm, args.dv, b, g, seq_kv, dim_v);
    }
  }
}

}  // namespace attnsuite::cpu
