// The workspace and params of the backward kernels (flash2's, flash3's), host side: one layout,
// one place that fills BackwardParams (common/kernel_params.hpp) from a problem and its views.
#pragma once

#include <cstddef>

#include "attnsuite/backend.hpp"
#include "attnsuite/problem.hpp"
#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda {

// The backward's workspace: LSE·log2 e and D = rowsum(dO∘O) per (batch, q head, query row),
// seq_q padded to kBackwardRowPadding (backward_rows.hpp), 4 bytes each, and unless
// deterministic the fp32 dQ sums, head_dim floats a row; each piece 256-byte aligned.
std::size_t backward_workspace_bytes(const AttentionProblem& problem, bool deterministic);

// The backward kernels' params for a problem, its views and args.workspace (laid out as above).
BackwardParams make_backward_params(const AttentionProblem& problem, const BackwardArgs& args, bool deterministic);

}  // namespace attnsuite::cuda
