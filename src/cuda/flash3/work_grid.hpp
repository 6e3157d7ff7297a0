// The 1-D grid of the Hopper forward kernels whose CTAs take works from a schedule
// (hopper/scheduler.cuh): flash3's, and flash3-fp8's persistent ones. Host code only.
#pragma once

#include <string_view>

#include "cuda/flash3/params.hpp"
#include "cuda/hopper/work_order.hpp"

namespace attnsuite::cuda::flash3 {

// Fills launch.q_tiles (⌈seq_q / tile_m⌉) and launch.works (q_tiles · heads_q · batch; past
// INT_MAX / 2 Error(Unsupported), naming `backend`) and returns how many CTAs to start: one per work,
// or per unit of the paired orders (hopper::paired_units), and at most one per SM of the current
// device when launch.persistent (one CTA per SM: the kernels' shared memory or their 168-register
// launch bound leaves no room for a second).
int work_grid(Params& launch, int tile_m, hopper::WorkOrder order, std::string_view backend);

}  // namespace attnsuite::cuda::flash3
