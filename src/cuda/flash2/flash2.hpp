#pragma once

#include <cstddef>
#include <memory>

#include "attnsuite/backend.hpp"
#include "attnsuite/registry.hpp"
#include "cuda/flash2/params.hpp"

namespace attnsuite::cuda {

std::unique_ptr<Backend> make_flash2_backend();
// Registers the experimental configurations `flash2-x-<name>` (only in builds configured with
// -DATTNSUITE_FLASH2_VARIANTS=ON, for the device script's kernel experiments).
void register_flash2_variants(Registry& registry);

namespace flash2 {
// The kernel's params for a problem and its views (pointers, strides, sizes, scale, the mask
// with causal folded into window_right). Shared with the block-sparse backends (src/cuda/sparge).
Params make_params(const AttentionProblem& problem, const AttentionArgs& args);
// Whether every row of a view starts 16-byte aligned (cp.async moves 16-byte chunks).
bool rows_aligned(const TensorView& view);

}  // namespace flash2

}  // namespace attnsuite::cuda
