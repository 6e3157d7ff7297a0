// The CPU kernels of the attention backward: dQ, dK, dV from Q, K, V, the forward's O and LSE,
// and dO (BackwardArgs). Free functions over the problem and the views; the backends call them.
//
//   reference  fp64 ground truth from Q, K, V and dO alone (P recomputed in double; the given O
//              and LSE are not read), one query row at a time over its visible keys only.
//   vanilla    materialized P and dP per (batch, q head), OpenBLAS sgemm for the five products,
//              fp32 compute (16-bit inputs converted); extra memory 2·seq_q·seq_kv floats.
//   flash      FlashAttention-2's backward: tiles of P recomputed from the LSE, never an
//              N×N buffer; threaded over (batch, kv head, key chunk), AVX2 micro-kernels.
//
// Semantics shared by all three: gradients have the shape and dtype of their inputs; with
// GQA/MQA dK and dV are summed over the query heads of a group. A query row that sees no key
// contributes nothing and gets dQ = 0 exactly. A NaN in an input reaches the gradients whose
// defining sums include it (the reference: exactly those). As in the forward, a NaN in Q, K or
// dO at a (query, key) pair the mask hides may also reach the fast kernels' gradients of that
// pair (0·NaN inside a tile's or a GEMM's product); a NaN in V never does (dS is set to 0 at
// hidden pairs, not multiplied).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/backend.hpp"
#include "core/reference.hpp"

namespace attnsuite::cpu {

// Checks args against the problem: every view present, on the CPU, in the problem's dtype and
// shape (dq like q, dk like k, dv like v, o and d_o (batch, seq_q, heads_q, dim_v)), the LSE
// present and on the CPU; with contiguous_last_dim, stride 1 in every view's last dim.
// Throws Error naming the first mismatch.
void check_backward_args(std::string_view backend, const AttentionProblem& problem, const BackwardArgs& args,
                         bool contiguous_last_dim);

// --- reference (src/cpu/reference/backward.cpp) -----------------------------------------------

// The gradients in double, dense in logical (batch, seq, heads, dim) order.
struct GradientsF64 {
  std::vector<double> dq;  // (batch, seq_q, heads_q, head_dim)
  std::vector<double> dk;  // (batch, seq_kv, heads_kv, head_dim)
  std::vector<double> dv;  // (batch, seq_kv, heads_kv, dim_v)
};

// One (batch, q head): dq is that head's seq_q × head_dim gradient; dk (seq_kv × head_dim) and
// dv (seq_kv × dim_v) are this q head's contribution to its kv head's gradients. All row-major,
// overwritten. Reads args.q, k, v and d_o only (any dtype, any strides, on the CPU).
void reference_backward_head_f64(const AttentionProblem& problem, const BackwardArgs& args, int batch_index, int q_head,
                                 double* dq, double* dk, double* dv);

// One (batch, kv head): reference_backward_kv_head_f64, declared in core/reference.hpp.

// The whole problem in double, threaded over (batch, q head); the result does not depend on
// the thread count.
GradientsF64 reference_backward_f64(const AttentionProblem& problem, const BackwardArgs& args, int threads);

// The whole problem into args.dq, dk, dv in their dtype (rounded once from double).
void reference_backward(const AttentionProblem& problem, const BackwardArgs& args, int threads);

// --- cpu-vanilla (src/cpu/vanilla/backward.cpp) -----------------------------------------------

// S = scale·Q·Kᵀ, P = exp(S − LSE) (masked), dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − D) with
// D = rowsum(dO∘O), dQ = scale·dS·K, dK += scale·dSᵀ·Q; per (batch, q head), in fp32.
// Needs a contiguous last dim. GEMMs run on OpenBLAS's threads, the element-wise passes on
// `threads`. Deterministic for a given OpenBLAS thread count.
void vanilla_backward(const AttentionProblem& problem, const BackwardArgs& args, int threads);

// --- cpu-flash (src/cpu/flash/backward.cpp) ---------------------------------------------------

// Tile configurations of the flash backward ("q96-k96": 96 queries × 96 keys per tile), the
// default first.
std::vector<std::string> flash_backward_configs();

// FlashAttention-2's backward. Needs a contiguous last dim. `config` empty means the default;
// an unknown name throws Error(Usage) listing the allowed ones. The result is the same for
// every run with the same thread count, and the same for every thread count when
// batch × heads_kv >= threads (each (batch, kv head) is then one work item); otherwise the key
// range of a kv head is split in ceil(threads / (batch × heads_kv)) chunks whose dQ parts are
// summed in chunk order.
void flash_backward(const AttentionProblem& problem, const BackwardArgs& args, int threads,
                    std::string_view config = {});

}  // namespace attnsuite::cpu
