// The peer backends: other projects' attention kernels behind attnsuite's Backend interface,
// so the harness measures them side by side with ours. Host-only header, no third-party headers.
#pragma once

#include "attnsuite/registry.hpp"
#include "core/peer_versions.hpp"

namespace attnsuite::peers {

// Registers the peers this build has, in this order: "cudnn" (cuDNN SDPA through
// cudnn-frontend) when ATTNSUITE_HAVE_CUDNN_PEER, then "torch-sdpa", "torch-flash",
// "torch-efficient", "torch-cudnn" and "torch-math" (libtorch) when ATTNSUITE_HAVE_TORCH_PEERS.
// Touches no GPU: without one, their supports() answer "no CUDA device available: ...".
void register_peer_backends(Registry& registry);

// The peers' library versions, peer_versions(), are declared in core/peer_versions.hpp.

}  // namespace attnsuite::peers
