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

template <class Params>
void fill_attention_params(Params& params, const AttentionProblem& problem, const AttentionArgs& args) {
  params.q = args.q.data;
  params.k = args.k.data;
  params.v = args.v.data;
  params.o = args.o.data;
  params.lse = args.lse.data;
  auto strides = [](const TensorView& view, std::int64_t& batch, std::int64_t& row, std::int64_t& head) {
    batch = view.strides[0];
    row = view.strides[1];
    head = view.strides[2];
  };
  strides(args.q, params.q_batch_stride, params.q_row_stride, params.q_head_stride);
  strides(args.k, params.k_batch_stride, params.k_row_stride, params.k_head_stride);
  strides(args.v, params.v_batch_stride, params.v_row_stride, params.v_head_stride);
  strides(args.o, params.o_batch_stride, params.o_row_stride, params.o_head_stride);
  params.batch = problem.batch;
  params.heads_q = problem.heads_q;
  params.heads_kv = problem.heads_kv;
  params.group_size = problem.group_size();
  params.seq_q = problem.seq_q;
  params.seq_kv = problem.seq_kv;
  params.head_dim = problem.head_dim;
  params.scale = problem.softmax_scale();
  params.scale_log2 = params.scale * std::numbers::log2e_v<float>;
  params.window_left = problem.window_left;
  params.window_right = problem.window_right;
  if (problem.causal) params.window_right = problem.window_right >= 0 ? std::min(problem.window_right, 0) : 0;
}

}  // namespace attnsuite::cuda
