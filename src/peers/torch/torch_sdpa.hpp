// The PyTorch peers through libtorch: torch-sdpa (PyTorch's own backend choice), torch-flash,
// torch-efficient, torch-cudnn and torch-math (each one named SDPA backend, forced).
// Host-only header; libtorch stays inside torch_sdpa.cpp.
#pragma once

#include <string>

#include "attnsuite/registry.hpp"

namespace attnsuite::peers {

// Adds the five in the order above. Creating them touches neither libtorch's CUDA state nor a GPU.
void register_torch_backends(Registry& registry);
// The libtorch this build links, "2.11.0".
std::string torch_version();

}  // namespace attnsuite::peers
