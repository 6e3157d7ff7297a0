#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

// `flash3`: the sm_90a (Hopper) kernel. Built and registered only with -DATTNSUITE_FLASH3=ON.
std::unique_ptr<Backend> make_flash3_backend();

}  // namespace attnsuite::cuda
