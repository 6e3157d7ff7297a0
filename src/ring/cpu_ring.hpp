// `cpu-ring`: ring attention (context parallelism, issue 10) over W simulated ranks, one thread
// each, exchanging K/V blocks through the in-process communicator; the local kernel is cpu-flash.
// It runs the same schedule and LSE merge as the CUDA `ring`, so the CPU tests check them for real.
#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::ring {

// Option "ring_world" = W (1..64; default 2): the number of simulated ranks.
std::unique_ptr<Backend> make_cpu_ring_backend();

}  // namespace attnsuite::ring
