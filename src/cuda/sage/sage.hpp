#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

// `sage`: INT8 Q·Kᵀ (smoothed K, per-tile scales), 16-bit P·V. `sage2`: INT8 Q·Kᵀ (per-warp /
// per-8-key scales), FP8 e4m3 P·V (sm_89+). docs/kernels/sage.md.
std::unique_ptr<Backend> make_sage_backend();
std::unique_ptr<Backend> make_sage2_backend();

}  // namespace attnsuite::cuda
