// `cudnn`: cuDNN's fused scaled-dot-product attention (the graph API through cudnn-frontend).
// Host-only header; cuDNN and cudnn-frontend stay inside cudnn_sdpa.cpp.
#pragma once

#include <memory>
#include <string>

#include "attnsuite/backend.hpp"

namespace attnsuite::peers {

std::unique_ptr<Backend> make_cudnn_sdpa_backend();
// The cuDNN library loaded at run time, "9.19.0".
std::string cudnn_version();

}  // namespace attnsuite::peers
