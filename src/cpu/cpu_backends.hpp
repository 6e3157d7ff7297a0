// The CPU backends: `reference` (fp64 ground truth), `cpu-vanilla` (BLAS, materialized scores),
// `cpu-flash` (tiled online softmax, threaded, vectorized).
#pragma once

#include "attnsuite/backend.hpp"
#include "attnsuite/registry.hpp"
#include "core/reference.hpp"  // reference_head_f64, defined with `reference`

namespace attnsuite::cpu {

void register_cpu_backends(Registry& registry);

}  // namespace attnsuite::cpu
