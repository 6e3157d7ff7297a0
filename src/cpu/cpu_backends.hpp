// The CPU backends: `reference` (fp64 ground truth), `cpu-vanilla` (BLAS, materialized scores),
// `cpu-flash` (tiled online softmax, threaded, vectorized).
#pragma once

#include "attnsuite/backend.hpp"
#include "attnsuite/registry.hpp"

namespace attnsuite::cpu {

void register_cpu_backends(Registry& registry);

// The fp64 reference for one (batch, q head) slice: out is seq_q × dim_v (row-major), lse is
// seq_q (natural log; -inf for rows that see no key). Inputs are read through args.q/k/v (any
// dtype, any strides, on the CPU); accumulation is in double throughout.
void reference_head_f64(const AttentionProblem& problem, const AttentionArgs& args, int batch_index,
                        int q_head, double* out, double* lse);

}  // namespace attnsuite::cpu
