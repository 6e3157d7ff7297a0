// The versions of the peers' libraries in this build, for the results header (report/sweep.cpp),
// which may not include src/peers. Defined in src/peers/register.cpp: in builds with the peers
// only (ATTNSUITE_HAVE_PEERS).
#pragma once

#include <string>

namespace attnsuite::peers {

// Empty when that peer is not built.
struct PeerVersions {
  std::string cudnn;
  std::string torch;
};
PeerVersions peer_versions();

}  // namespace attnsuite::peers
