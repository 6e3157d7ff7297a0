// The CPU sparse backends' factories: `cpu-sparge` and `cpu-block-sparse`.
#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::sparse {

std::unique_ptr<Backend> make_cpu_sparge_backend();
std::unique_ptr<Backend> make_cpu_block_sparse_backend();

}  // namespace attnsuite::sparse
