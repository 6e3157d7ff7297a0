// `ring`: context-parallel attention over the visible GPUs (issue 10, docs/multi-gpu.md). Q, K
// and V are sharded by sequence in the zigzag order of ring/schedule.hpp; K/V blocks travel
// around the ring with NCCL send/recv on a stream of their own while the local kernel (flash3 on
// sm_90, else flash2) runs on the block at hand; partials are merged by their LSE in fp32.
// Built where nccl.h is found (src/cuda/CMakeLists.txt); libnccl.so.2 is loaded when it runs
// (nccl_library.hpp).
#pragma once

#include <memory>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

// Options: "ring_world" = W (default: every visible GPU; 1 runs a ring of one),
// "ring_mode" = full | compute-only | comm-only (the two halves, timed apart for the
// communication-hidden figure; their outputs are not attention and their accuracy is not
// meaningful), "ring_inputs" = scatter | resident (see ring.cpp).
std::unique_ptr<Backend> make_ring_backend();

}  // namespace attnsuite::cuda
