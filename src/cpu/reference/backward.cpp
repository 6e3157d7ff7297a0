// The fp64 reference of the backward: the ground truth the other backward kernels are checked
// against. Everything is recomputed in double from Q, K, V and dO (the forward's O and LSE are
// not read), one query row at a time over exactly the keys the mask shows it:
//   p_j = softmax_j(scale·q·k_j),  dp_j = dO·v_j,  D = Σ_j p_j·dp_j (= dO·O),
//   ds_j = p_j·(dp_j − D),  dq = scale·Σ_j ds_j·k_j,  dk_j += scale·ds_j·q,  dv_j += p_j·dO.
// Slow by design (no vectorization beyond what the compiler finds).
#include "cpu/backward.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attnsuite/error.hpp"
#include "attnsuite/memory.hpp"
#include "cpu/common.hpp"

namespace attnsuite::cpu {
namespace {

// The reference reads only Q, K, V and dO.
void check_inputs(const AttentionProblem& problem, const BackwardArgs& args) {
  problem.validate();
  const ViewShapes shape = view_shapes(problem);
  check_view("reference", "q", args.q, shape.q, problem.dtype, false);
  check_view("reference", "k", args.k, shape.k, problem.dtype, false);
  check_view("reference", "v", args.v, shape.v, problem.dtype, false);
  check_view("reference", "d_o", args.d_o, shape.o, problem.dtype, false);
}

void load_row(const TensorView& view, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t count, double* out) {
  for (std::int64_t d = 0; d < count; ++d) out[d] = load_as_float(view.data, view.dtype, view.offset(b, s, h, d));
}

// Row chunks of one head for `threads` threads: each chunk's dK/dV parts beside the first chunk's
// (which writes dk, dv directly) cost seq_kv·(head_dim + dim_v) doubles, so at most
// kPartBudgetBytes of them. One chunk computes exactly the one-thread sums.
constexpr std::int64_t kPartBudgetBytes = std::int64_t{256} << 20;
constexpr std::int64_t kRowsPerChunkMin = 64;

void head_backward(const AttentionProblem& problem, const BackwardArgs& args, int b, int h, double* dq, double* dk,
                   double* dv, int threads = 1) {
  const std::int64_t seq_q = problem.seq_q, seq_kv = problem.seq_kv;
  const std::int64_t head_dim = problem.head_dim, dim_v = problem.dim_v();
  const int kv_head = problem.kv_head_of(h);
  const double scale = problem.softmax_scale();

  // K and V of the kv head as dense double rows, read by every chunk.
  HostBuffer kv(static_cast<std::size_t>(seq_kv * (head_dim + dim_v)) * sizeof(double));
  double* keys = kv.as<double>();
  double* values = keys + seq_kv * head_dim;
  for (std::int64_t j = 0; j < seq_kv; ++j) {
    load_row(args.k, b, j, kv_head, head_dim, keys + j * head_dim);
    load_row(args.v, b, j, kv_head, dim_v, values + j * dim_v);
  }

  const std::int64_t part_doubles = seq_kv * (head_dim + dim_v);
  const std::int64_t chunks =
      std::max<std::int64_t>(1, std::min({static_cast<std::int64_t>(threads), seq_q / kRowsPerChunkMin,
                                          1 + kPartBudgetBytes / std::max<std::int64_t>(1, part_doubles * 8)}));
  HostBuffer parts(static_cast<std::size_t>((chunks - 1) * part_doubles) * sizeof(double));
  std::fill(dq, dq + seq_q * head_dim, 0.0);
  std::fill(dk, dk + seq_kv * head_dim, 0.0);
  std::fill(dv, dv + seq_kv * dim_v, 0.0);
  if (chunks > 1) std::fill(parts.as<double>(), parts.as<double>() + (chunks - 1) * part_doubles, 0.0);

  // Rows [row_begin, row_end): dq's rows, and their parts of dK and dV into dk_sum, dv_sum.
  const auto rows = [&](std::int64_t row_begin, std::int64_t row_end, double* dk_sum, double* dv_sum) {
    HostBuffer scratch(static_cast<std::size_t>(2 * seq_kv + head_dim + dim_v) * sizeof(double));
    double* p = scratch.as<double>();
    double* dp = p + seq_kv;
    double* query = dp + seq_kv;
    double* grad_out = query + head_dim;
    for (std::int64_t i = row_begin; i < row_end; ++i) {
      const std::int64_t begin = problem.key_begin(i);
      const std::int64_t end = problem.key_end(i);
      if (begin >= end) continue;  // no key: no contribution, dq row 0
      load_row(args.q, b, i, h, head_dim, query);
      load_row(args.d_o, b, i, h, dim_v, grad_out);

      double row_max = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = begin; j < end; ++j) {
        const double* key = keys + j * head_dim;
        double dot = 0.0;
        for (std::int64_t d = 0; d < head_dim; ++d) dot += query[d] * key[d];
        p[j] = dot * scale;
        row_max = std::max(row_max, p[j]);
      }
      double row_sum = 0.0;
      for (std::int64_t j = begin; j < end; ++j) {
        p[j] = std::exp(p[j] - row_max);
        row_sum += p[j];
      }
      double row_dot = 0.0;  // D = Σ_j p_j·dp_j
      for (std::int64_t j = begin; j < end; ++j) {
        p[j] /= row_sum;
        const double* value = values + j * dim_v;
        double dot = 0.0;
        for (std::int64_t d = 0; d < dim_v; ++d) dot += grad_out[d] * value[d];
        dp[j] = dot;
        row_dot += p[j] * dot;
      }
      double* dq_row = dq + i * head_dim;
      for (std::int64_t j = begin; j < end; ++j) {
        const double ds = p[j] * (dp[j] - row_dot);
        const double* key = keys + j * head_dim;
        double* dk_row = dk_sum + j * head_dim;
        double* dv_row = dv_sum + j * dim_v;
        for (std::int64_t d = 0; d < head_dim; ++d) {
          dq_row[d] += ds * key[d];
          dk_row[d] += scale * ds * query[d];
        }
        for (std::int64_t d = 0; d < dim_v; ++d) dv_row[d] += p[j] * grad_out[d];
      }
      for (std::int64_t d = 0; d < head_dim; ++d) dq_row[d] *= scale;
    }
  };
  // Contiguous row chunks; their dK/dV parts added in chunk order (the result depends on the
  // chunk count only through that order of additions).
  if (chunks == 1) return rows(0, seq_q, dk, dv);
  parallel_for(chunks, static_cast<int>(chunks), [&](std::int64_t chunk, int) {
    const std::int64_t row_begin = seq_q * chunk / chunks, row_end = seq_q * (chunk + 1) / chunks;
    double* part = chunk == 0 ? nullptr : parts.as<double>() + (chunk - 1) * part_doubles;
    rows(row_begin, row_end, chunk == 0 ? dk : part, chunk == 0 ? dv : part + seq_kv * head_dim);
  });
  for (std::int64_t chunk = 1; chunk < chunks; ++chunk) {
    const double* part = parts.as<double>() + (chunk - 1) * part_doubles;
    for (std::int64_t n = 0; n < seq_kv * head_dim; ++n) dk[n] += part[n];
    for (std::int64_t n = 0; n < seq_kv * dim_v; ++n) dv[n] += part[seq_kv * head_dim + n];
  }
}

void check_slice(const AttentionProblem& problem, int b, int head, int heads) {
  ATTNSUITE_CHECK(b >= 0 && b < problem.batch && head >= 0 && head < heads, ErrorKind::Usage,
                  fmt::format("reference backward: slice (batch {}, head {}) is outside the "
                              "problem ({})",
                              b, head, problem.describe()));
}

// Every (batch, q head) as one work item; dq goes to store_dq(b, h, dq), and each kv head's
// gradients, summed over its group in q-head order, to store_kv(b, kv_head, dk, dv). With GQA
// the q heads' dK/dV parts wait in a buffer (batch·heads_q·seq_kv·(head_dim + dim_v) doubles)
// and are summed in a second pass, so the result does not depend on the thread count.
template <class StoreDq, class StoreKv>
void for_every_head(const AttentionProblem& problem, const BackwardArgs& args, int threads, StoreDq&& store_dq,
                    StoreKv&& store_kv) {
  const std::int64_t dq_size = static_cast<std::int64_t>(problem.seq_q) * problem.head_dim;
  const std::int64_t dk_size = static_cast<std::int64_t>(problem.seq_kv) * problem.head_dim;
  const std::int64_t dv_size = static_cast<std::int64_t>(problem.seq_kv) * problem.dim_v();
  const int group = problem.group_size();
  const std::int64_t heads = static_cast<std::int64_t>(problem.batch) * problem.heads_q;
  HostBuffer parts;
  if (group > 1) parts = HostBuffer(static_cast<std::size_t>(heads * (dk_size + dv_size)) * sizeof(double));
  parallel_for(heads, threads, [&](std::int64_t item, int) {
    const int b = static_cast<int>(item / problem.heads_q);
    const int h = static_cast<int>(item % problem.heads_q);
    const std::int64_t own_kv = group > 1 ? 0 : dk_size + dv_size;
    HostBuffer scratch(static_cast<std::size_t>(dq_size + own_kv) * sizeof(double));
    double* dq = scratch.as<double>();
    double* dk = group > 1 ? parts.as<double>() + item * (dk_size + dv_size) : dq + dq_size;
    double* dv = dk + dk_size;
    head_backward(problem, args, b, h, dq, dk, dv);
    store_dq(b, h, dq);
    if (group == 1) store_kv(b, h, dk, dv);
  });
  if (group == 1) return;
  parallel_for(static_cast<std::int64_t>(problem.batch) * problem.heads_kv, threads, [&](std::int64_t unit, int) {
    const int b = static_cast<int>(unit / problem.heads_kv);
    const int g = static_cast<int>(unit % problem.heads_kv);
    double* first =
        parts.as<double>() + (static_cast<std::int64_t>(b) * problem.heads_q + g * group) * (dk_size + dv_size);
    for (int member = 1; member < group; ++member) {
      const double* next = first + member * (dk_size + dv_size);
      for (std::int64_t n = 0; n < dk_size + dv_size; ++n) first[n] += next[n];
    }
    store_kv(b, g, first, first + dk_size);
  });
}

// Writes a seq × dim row-major block of head h into a (batch, seq, heads, dim) sink.
template <class Sink>
void scatter(const double* block, std::int64_t seq, std::int64_t dim, Sink&& sink) {
  for (std::int64_t s = 0; s < seq; ++s)
    for (std::int64_t d = 0; d < dim; ++d) sink(s, d, block[s * dim + d]);
}

}  // namespace

void reference_backward_head_f64(const AttentionProblem& problem, const BackwardArgs& args, int batch_index, int q_head,
                                 double* dq, double* dk, double* dv) {
  check_inputs(problem, args);
  check_slice(problem, batch_index, q_head, problem.heads_q);
  head_backward(problem, args, batch_index, q_head, dq, dk, dv);
}

void reference_backward_kv_head_f64(const AttentionProblem& problem, const BackwardArgs& args, int batch_index,
                                    int kv_head, double* dq, double* dk, double* dv, int threads) {
  check_inputs(problem, args);
  check_slice(problem, batch_index, kv_head, problem.heads_kv);
  const std::int64_t dq_size = static_cast<std::int64_t>(problem.seq_q) * problem.head_dim;
  const std::int64_t dk_size = static_cast<std::int64_t>(problem.seq_kv) * problem.head_dim;
  const std::int64_t dv_size = static_cast<std::int64_t>(problem.seq_kv) * problem.dim_v();
  HostBuffer part(static_cast<std::size_t>(dk_size + dv_size) * sizeof(double));
  const int group = problem.group_size();
  for (int member = 0; member < group; ++member) {
    double* dk_part = member == 0 ? dk : part.as<double>();
    double* dv_part = member == 0 ? dv : part.as<double>() + dk_size;
    head_backward(problem, args, batch_index, kv_head * group + member, dq + member * dq_size, dk_part, dv_part,
                  threads);
    if (member == 0) continue;
    for (std::int64_t n = 0; n < dk_size; ++n) dk[n] += dk_part[n];
    for (std::int64_t n = 0; n < dv_size; ++n) dv[n] += dv_part[n];
  }
}

GradientsF64 reference_backward_f64(const AttentionProblem& problem, const BackwardArgs& args, int threads) {
  check_inputs(problem, args);
  const std::int64_t nq = problem.seq_q, nk = problem.seq_kv, hq = problem.heads_q, hkv = problem.heads_kv,
                     d = problem.head_dim, dv = problem.dim_v();
  GradientsF64 out;
  out.dq.resize(static_cast<std::size_t>(problem.batch * nq * hq * d));
  out.dk.resize(static_cast<std::size_t>(problem.batch * nk * hkv * d));
  out.dv.resize(static_cast<std::size_t>(problem.batch * nk * hkv * dv));
  for_every_head(
      problem, args, threads,
      [&](std::int64_t b, std::int64_t h, const double* dq) {
        scatter(dq, nq, d, [&](std::int64_t s, std::int64_t c, double value) {
          out.dq[static_cast<std::size_t>(((b * nq + s) * hq + h) * d + c)] = value;
        });
      },
      [&](std::int64_t b, std::int64_t g, const double* dk, const double* dv_block) {
        scatter(dk, nk, d, [&](std::int64_t s, std::int64_t c, double value) {
          out.dk[static_cast<std::size_t>(((b * nk + s) * hkv + g) * d + c)] = value;
        });
        scatter(dv_block, nk, dv, [&](std::int64_t s, std::int64_t c, double value) {
          out.dv[static_cast<std::size_t>(((b * nk + s) * hkv + g) * dv + c)] = value;
        });
      });
  return out;
}

void reference_backward(const AttentionProblem& problem, const BackwardArgs& args, int threads) {
  check_inputs(problem, args);
  const ViewShapes shape = view_shapes(problem);
  check_view("reference", "dq", args.dq, shape.q, problem.dtype, false);
  check_view("reference", "dk", args.dk, shape.k, problem.dtype, false);
  check_view("reference", "dv", args.dv, shape.v, problem.dtype, false);
  const std::int64_t nq = problem.seq_q, nk = problem.seq_kv, d = problem.head_dim, dv = problem.dim_v();
  auto sink = [](const TensorView& view, std::int64_t b, std::int64_t h) {
    return [&view, b, h](std::int64_t s, std::int64_t c, double value) {
      store_from_float(view.data, view.dtype, view.offset(b, s, h, c), static_cast<float>(value));
    };
  };
  for_every_head(
      problem, args, threads,
      [&](std::int64_t b, std::int64_t h, const double* dq) { scatter(dq, nq, d, sink(args.dq, b, h)); },
      [&](std::int64_t b, std::int64_t g, const double* dk, const double* dv_block) {
        scatter(dk, nk, d, sink(args.dk, b, g));
        scatter(dv_block, nk, dv, sink(args.dv, b, g));
      });
}

}  // namespace attnsuite::cpu
