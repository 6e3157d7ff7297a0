// `reference`: the fp64 ground truth. Scores of one query row are materialized in double,
// softmax and P·V are accumulated in double; any dtype and any strides are read element by
// element through TensorView::load (e4m3: the dequantized value, e4m3 × descale). Slow by design; the harness uses
// reference_head_f64 to check every other backend on a subset of (batch, head) slices.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnsuite/error.hpp"
#include "core/cancel.hpp"
#include "cpu/backward.hpp"
#include "cpu/common.hpp"
#include "cpu/cpu_backends.hpp"

namespace attnsuite::cpu {

void reference_head_f64(const AttentionProblem& problem, const AttentionArgs& args, int batch_index, int q_head,
                        double* out, double* lse) {
  ATTNSUITE_CHECK(batch_index >= 0 && batch_index < problem.batch && q_head >= 0 && q_head < problem.heads_q,
                  ErrorKind::Usage,
                  fmt::format("reference: slice (batch {}, head {}) is outside the problem ({})", batch_index, q_head,
                              problem.describe()));
  const std::int64_t seq_q = problem.seq_q, seq_kv = problem.seq_kv;
  const std::int64_t head_dim = problem.head_dim, dim_v = problem.dim_v();
  const int kv_head = problem.kv_head_of(q_head);
  const double scale = problem.softmax_scale();

  // K and V of this kv head as dense double rows, read once per slice.
  std::vector<double> keys(static_cast<std::size_t>(seq_kv * head_dim));
  std::vector<double> values(static_cast<std::size_t>(seq_kv * dim_v));
  for (std::int64_t j = 0; j < seq_kv; ++j) {
    for (std::int64_t d = 0; d < head_dim; ++d)
      keys[j * head_dim + d] = args.k.load(args.k.offset(batch_index, j, kv_head, d));
    for (std::int64_t d = 0; d < dim_v; ++d)
      values[j * dim_v + d] = args.v.load(args.v.offset(batch_index, j, kv_head, d));
  }

  std::vector<double> query(static_cast<std::size_t>(head_dim));
  std::vector<double> scores(static_cast<std::size_t>(seq_kv));
  for (std::int64_t i = 0; i < seq_q; ++i) {
    // A row of an N = 16k head is 4 MFLOP of fp64; a whole head is seconds (core/cancel.hpp).
    throw_if_cancelled();
    double* out_row = out + i * dim_v;
    std::fill(out_row, out_row + dim_v, 0.0);
    const std::int64_t begin = problem.key_begin(i);
    const std::int64_t end = problem.key_end(i);
    if (begin >= end) {  // the mask leaves this row no key
      if (lse != nullptr) lse[i] = -std::numeric_limits<double>::infinity();
      continue;
    }
    for (std::int64_t d = 0; d < head_dim; ++d) query[d] = args.q.load(args.q.offset(batch_index, i, q_head, d));
    double row_max = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = begin; j < end; ++j) {
      double dot = 0.0;
      for (std::int64_t d = 0; d < head_dim; ++d) dot += query[d] * keys[j * head_dim + d];
      scores[j] = dot * scale;
      row_max = std::max(row_max, scores[j]);
    }
    double row_sum = 0.0;
    for (std::int64_t j = begin; j < end; ++j) {
      const double p = std::exp(scores[j] - row_max);
      row_sum += p;
      for (std::int64_t d = 0; d < dim_v; ++d) out_row[d] += p * values[j * dim_v + d];
    }
    for (std::int64_t d = 0; d < dim_v; ++d) out_row[d] /= row_sum;
    if (lse != nullptr) lse[i] = row_max + std::log(row_sum);
  }
}

namespace {

class ReferenceBackend final : public CpuBackend {
 public:
  ReferenceBackend()
      : CpuBackend("reference", "fp64 reference (attnsuite)",
                   "fp32/fp16/bf16 (e4m3 in, bf16 out: forward only), fp64 accumulation, any strides, "
                   "causal, window, GQA/MQA, head dim 32..256") {}
  Support supports(const AttentionProblem& problem) const override {
    return supports_common(problem, /*takes_e4m3=*/true);
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    return configless_plan(
        *this, problem, options, [this, problem](const AttentionArgs& args, Stream, RunReport&) { run(problem, args); },
        [this, problem](const BackwardArgs& args, Stream, RunReport&) {
          check_backward_args(name(), problem, args, /*contiguous_last_dim=*/false);
          reference_backward(problem, args, cpu_threads());
        });
  }

 private:
  void run(const AttentionProblem& problem, const AttentionArgs& args) const {
    check_args(name(), problem, args, /*contiguous_last_dim=*/false);
    const std::int64_t seq_q = problem.seq_q, dim_v = problem.dim_v();
    parallel_for(static_cast<std::int64_t>(problem.batch) * problem.heads_q, cpu_threads(),
                 [&](std::int64_t item, int) {
                   const int b = static_cast<int>(item / problem.heads_q);
                   const int h = static_cast<int>(item % problem.heads_q);
                   std::vector<double> out(static_cast<std::size_t>(seq_q * dim_v));
                   std::vector<double> lse(static_cast<std::size_t>(seq_q));
                   reference_head_f64(problem, args, b, h, out.data(), lse.data());
                   for (std::int64_t i = 0; i < seq_q; ++i) {
                     for (std::int64_t d = 0; d < dim_v; ++d) {
                       store_from_float(args.o.data, args.o.dtype, args.o.offset(b, i, h, d),
                                        static_cast<float>(out[i * dim_v + d]));
                     }
                   }
                   if (!args.lse.empty()) {
                     float* lse_out = args.lse.data + item * seq_q;
                     for (std::int64_t i = 0; i < seq_q; ++i) lse_out[i] = static_cast<float>(lse[i]);
                   }
                 });
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace attnsuite::cpu
