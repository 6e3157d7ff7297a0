// `sparge` (predicted block-sparse attention: the predictor kernels, then flash2's block-sparse
// kernel) and `block-sparse` (the same kernel with a user-given mask), as Backends.
#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

std::unique_ptr<Backend> make_sparge_backend();
std::unique_ptr<Backend> make_block_sparse_backend();

}  // namespace attnsuite::cuda
