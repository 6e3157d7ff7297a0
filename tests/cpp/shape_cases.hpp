// The odd shapes every CPU kernel's forward and backward are checked on (lengths 1, 7, 33, 1000,
// seq_q != seq_kv both ways under causal masking, decoding, GQA/MQA, head dims 32-256 and
// dim_v != dim, windows, a peaked softmax), with the two small builders the tests use.
#pragma once

#include <string>
#include <vector>

#include "attnsuite/problem.hpp"

namespace attnsuite::test_shapes {

struct Case {
  std::string label;
  AttentionProblem problem;
};

inline AttentionProblem shape(int batch, int heads_q, int heads_kv, int seq_q, int seq_kv, int head_dim,
                              int head_dim_v = 0) {
  AttentionProblem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v;
  return p;
}

inline AttentionProblem with(AttentionProblem p, bool causal, int window_left = -1, int window_right = -1) {
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  return p;
}

inline std::vector<Case> shape_cases() {
  std::vector<Case> list = {
      {"seq1", shape(1, 2, 2, 1, 1, 64)},
      {"seq7", shape(2, 2, 2, 7, 7, 64)},
      {"seq33", shape(2, 3, 3, 33, 33, 64)},
      {"seq1000", shape(1, 1, 1, 1000, 1000, 64)},
      {"causal_seq1000", with(shape(1, 2, 1, 1000, 1000, 64), true)},
      {"causal_seq7", with(shape(1, 2, 2, 7, 7, 32), true)},
      {"causal_q_lt_kv", with(shape(1, 2, 2, 33, 200, 64), true)},
      {"causal_q_gt_kv", with(shape(1, 2, 2, 200, 33, 64), true)},   // early rows see no key
      {"q1_kv300_causal", with(shape(2, 2, 2, 1, 300, 128), true)},  // decoding
      {"gqa_8_2", with(shape(1, 8, 2, 65, 130, 64), true)},
      {"mqa_4_1", shape(2, 4, 1, 50, 97, 64)},
      {"dim40_dv72", shape(1, 2, 2, 61, 77, 40, 72)},
      {"dim128_dv32", with(shape(1, 2, 1, 100, 120, 128, 32), true)},
      {"dim256", shape(1, 2, 2, 100, 100, 256)},
      {"window_local", with(shape(1, 2, 2, 300, 300, 64), true, 40, 0)},
      {"window_both", with(shape(1, 2, 2, 250, 260, 64), false, 17, 9)},
      {"window_masks_rows", with(shape(1, 2, 2, 150, 40, 64), true, 5, 0)},
      {"window_right_only", with(shape(1, 2, 2, 120, 50, 64), false, -1, 3)},
  };
  AttentionProblem peaked = shape(1, 2, 2, 200, 300, 64);
  peaked.scale = 1.0f;  // scores with std 8: the running max moves, P is far from uniform
  list.push_back({"peaked_scale", peaked});
  return list;
}

}  // namespace attnsuite::test_shapes
