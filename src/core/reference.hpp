// The fp64 ground truth the harness checks every backend against, per slice. Declared here so
// that the runner (bench) reaches it without including a backend room; defined with the
// `reference` backend (src/cpu/reference/reference.cpp and backward.cpp).
#pragma once

#include "attnsuite/backend.hpp"

namespace attnsuite::cpu {

// The fp64 reference for one (batch, q head) slice: out is seq_q × dim_v (row-major), lse is
// seq_q (natural log; -inf for rows that see no key). Inputs are read through args.q/k/v (any
// dtype, any strides, on the CPU); accumulation is in double throughout.
void reference_head_f64(const AttentionProblem& problem, const AttentionArgs& args, int batch_index, int q_head,
                        double* out, double* lse);

// The backward for one (batch, kv head): dq holds the group's q heads one after another
// (group_size × seq_q × head_dim), dk and dv the kv head's gradients summed over the group in
// q-head order. All row-major, overwritten. Reads args.q, k, v and d_o only (any dtype, any
// strides, on the CPU). threads > 1: each head's query rows in up to that many chunks at once
// (for a lone slice: the bench's reference of one N = 16k head took ~30 s on one thread).
void reference_backward_kv_head_f64(const AttentionProblem& problem, const BackwardArgs& args, int batch_index,
                                    int kv_head, double* dq, double* dk, double* dv, int threads = 1);

}  // namespace attnsuite::cpu
