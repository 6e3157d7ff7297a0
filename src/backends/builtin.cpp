#include "attnsuite/registry.hpp"
#include "cpu/cpu_backends.hpp"

#if ATTNSUITE_HAVE_CUDA
#include "cuda/cuda_backends.hpp"
#endif
#if ATTNSUITE_HAVE_PEERS
#include "peers/peers.hpp"
#endif

namespace attnsuite {

// Registration is explicit (not static initializers) so that linking the static library never
// drops a backend, and the order here is the order `attnsuite list` shows.
void register_builtin_backends(Registry& registry) {
  cpu::register_cpu_backends(registry);
#if ATTNSUITE_HAVE_CUDA
  cuda::register_cuda_backends(registry);
#endif
#if ATTNSUITE_HAVE_PEERS
  peers::register_peer_backends(registry);
#endif
}

}  // namespace attnsuite
