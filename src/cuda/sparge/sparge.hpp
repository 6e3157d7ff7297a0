// `sparge` (predicted block-sparse attention: the predictor kernels, then flash3's kernel over
// the kept blocks on sm_90, flash2's block-sparse kernel elsewhere), `block-sparse` (the same
// kernels with a user-given mask) and `sparge-sage` (the predictor, then sage2's quantization
// and its sm_90a wgmma kernel over the kept blocks), as Backends.
#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

std::unique_ptr<Backend> make_sparge_backend();
std::unique_ptr<Backend> make_block_sparse_backend();
std::unique_ptr<Backend> make_sparge_sage_backend();

}  // namespace attnsuite::cuda
