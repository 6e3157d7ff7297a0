// The peer backends: other projects' attention kernels behind attnsuite's Backend interface,
// so the harness measures them side by side with ours. Host-only header, no third-party headers.
#pragma once

#include <string>

#include "attnsuite/registry.hpp"

namespace attnsuite::peers {

// Registers the peers this build has, in this order: "cudnn" (cuDNN SDPA through
// cudnn-frontend) when ATTNSUITE_HAVE_CUDNN_PEER, then "torch-sdpa", "torch-flash",
// "torch-efficient", "torch-cudnn" and "torch-math" (libtorch) when ATTNSUITE_HAVE_TORCH_PEERS.
// Touches no GPU: without one, their supports() answer "no CUDA device available: ...".
void register_peer_backends(Registry& registry);

// Versions of the peers' libraries in this build, for the results header; empty when not built.
struct PeerVersions {
  std::string cudnn;
  std::string torch;
};
PeerVersions peer_versions();

}  // namespace attnsuite::peers
