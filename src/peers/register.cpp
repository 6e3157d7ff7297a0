#include "peers/peers.hpp"

#if ATTNSUITE_HAVE_CUDNN_PEER
#include "peers/cudnn/cudnn_sdpa.hpp"
#endif
#if ATTNSUITE_HAVE_TORCH_PEERS
#include "peers/torch/torch_sdpa.hpp"
#endif

namespace attnsuite::peers {

void register_peer_backends([[maybe_unused]] Registry& registry) {
#if ATTNSUITE_HAVE_CUDNN_PEER
  registry.add("cudnn", make_cudnn_sdpa_backend);
#endif
#if ATTNSUITE_HAVE_TORCH_PEERS
  register_torch_backends(registry);
#endif
}

PeerVersions peer_versions() {
  PeerVersions versions;
#if ATTNSUITE_HAVE_CUDNN_PEER
  versions.cudnn = cudnn_version();
#endif
#if ATTNSUITE_HAVE_TORCH_PEERS
  versions.torch = torch_version();
#endif
  return versions;
}

}  // namespace attnsuite::peers
