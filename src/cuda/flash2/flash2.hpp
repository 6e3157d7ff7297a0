#pragma once

#include <memory>

#include "attnsuite/backend.hpp"
#include "attnsuite/registry.hpp"

namespace attnsuite::cuda {

std::unique_ptr<Backend> make_flash2_backend();
// Registers the experimental configurations `flash2-x-<name>` (only in builds configured with
// -DATTNSUITE_FLASH2_VARIANTS=ON, for the device script's kernel experiments).
void register_flash2_variants(Registry& registry);

}  // namespace attnsuite::cuda
