#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

std::unique_ptr<Backend> make_cuda_vanilla_backend();

}  // namespace attnsuite::cuda
