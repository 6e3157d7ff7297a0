// The backward's workspace layout and params (backward_workspace.hpp).
#include "cuda/common/backward_workspace.hpp"

#include <cstdint>

#include "cuda/common/attention_params.hpp"
#include "cuda/common/backward_rows.hpp"

namespace attnsuite::cuda {
namespace {

constexpr std::size_t kWorkspaceAlignment = 256;

constexpr std::size_t align_up(std::size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// The workspace's rows: (batch, heads_q, seq_q padded to kBackwardRowPadding).
std::size_t padded_rows(const AttentionProblem& problem) {
  const std::size_t padded =
      (static_cast<std::size_t>(problem.seq_q) + kBackwardRowPadding - 1) / kBackwardRowPadding * kBackwardRowPadding;
  return static_cast<std::size_t>(problem.batch) * static_cast<std::size_t>(problem.heads_q) * padded;
}

}  // namespace

std::size_t backward_workspace_bytes(const AttentionProblem& problem, bool deterministic) {
  const std::size_t rows = padded_rows(problem);
  const std::size_t row_floats = align_up(rows * sizeof(float));  // LSE·log2 e, then D
  const std::size_t dq_sums = deterministic ? 0 : align_up(rows * problem.head_dim * sizeof(float));
  return 2 * row_floats + dq_sums;
}

BackwardParams make_backward_params(const AttentionProblem& problem, const BackwardArgs& args, bool deterministic) {
  AttentionArgs forward_args;
  forward_args.q = args.q;
  forward_args.k = args.k;
  forward_args.v = args.v;
  forward_args.o = args.o;
  forward_args.lse = args.lse;
  BackwardParams params;
  fill_attention_params(params, problem, forward_args);
  copy_view(args.d_o, params.d_o, params.d_o_batch_stride, params.d_o_row_stride, params.d_o_head_stride);
  copy_view(args.dq, params.dq, params.dq_batch_stride, params.dq_row_stride, params.dq_head_stride);
  copy_view(args.dk, params.dk, params.dk_batch_stride, params.dk_row_stride, params.dk_head_stride);
  copy_view(args.dv, params.dv, params.dv_batch_stride, params.dv_row_stride, params.dv_head_stride);
  params.seq_q_padded = (problem.seq_q + kBackwardRowPadding - 1) / kBackwardRowPadding * kBackwardRowPadding;
  const std::size_t row_floats = align_up(padded_rows(problem) * sizeof(float));
  auto* workspace = static_cast<unsigned char*>(args.workspace);
  params.lse_log2 = reinterpret_cast<float*>(workspace);
  params.row_dot = reinterpret_cast<float*>(workspace + row_floats);
  params.dq_accum = deterministic ? nullptr : reinterpret_cast<float*>(workspace + 2 * row_floats);
  return params;
}

}  // namespace attnsuite::cuda
