// The fields every fused kernel's Params shares (flash2, flash3, flash3-fp8, and sparge through
// flash2's): pointers, strides in elements, sizes, the softmax scale (also ·log2 e), and the
// bottom-right mask with causal folded into window_right (min(window_right, 0)). Host-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numbers>

#include "attnsuite/backend.hpp"
#include "attnsuite/problem.hpp"

namespace attnsuite::cuda {

// A view's data pointer and its batch, row (sequence) and head strides, in elements (Int: the
// params' own type).
template <class Pointer, class Int>
void copy_view(const TensorView& view, Pointer& data, Int& batch, Int& row, Int& head) {
  data = view.data;
  batch = view.strides[0];
  row = view.strides[1];
  head = view.strides[2];
}

// batch, heads_q, heads_kv, group_size, seq_q, seq_kv, head_dim: the sizes every kernel's
// params (and sage's, sparge's predictor's) name alike.
template <class Params>
void fill_sizes(Params& params, const AttentionProblem& problem) {
  params.batch = problem.batch;
  params.heads_q = problem.heads_q;
  params.heads_kv = problem.heads_kv;
  params.group_size = problem.group_size();
  params.seq_q = problem.seq_q;
  params.seq_kv = problem.seq_kv;
  params.head_dim = problem.head_dim;
}

// window_left, and window_right with causal folded in (AttentionProblem::right_bound).
template <class Params>
void fill_window(Params& params, const AttentionProblem& problem) {
  params.window_left = problem.window_left;
  params.window_right = problem.right_bound();
}

template <class Params>
void fill_attention_params(Params& params, const AttentionProblem& problem, const AttentionArgs& args) {
  copy_view(args.q, params.q, params.q_batch_stride, params.q_row_stride, params.q_head_stride);
  copy_view(args.k, params.k, params.k_batch_stride, params.k_row_stride, params.k_head_stride);
  copy_view(args.v, params.v, params.v_batch_stride, params.v_row_stride, params.v_head_stride);
  copy_view(args.o, params.o, params.o_batch_stride, params.o_row_stride, params.o_head_stride);
  params.lse = args.lse.data;
  fill_sizes(params, problem);
  params.scale = problem.softmax_scale();
  params.scale_log2 = params.scale * std::numbers::log2e_v<float>;
  fill_window(params, problem);
}

}  // namespace attnsuite::cuda
