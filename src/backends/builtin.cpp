#include "attnsuite/registry.hpp"
#include "cpu/cpu_backends.hpp"
#include "ring/cpu_ring.hpp"

#if ATTNSUITE_HAVE_CUDA
#include "cuda/cuda_backends.hpp"
#endif
#if ATTNSUITE_HAVE_NCCL
#include "ring/cuda/ring.hpp"
#endif
#if ATTNSUITE_HAVE_PEERS
#include "peers/peers.hpp"
#endif

namespace attnsuite {

// Registration is explicit (not static initializers) so that linking the static library never
// drops a backend, and the order here is the order `attnsuite list` shows.
void register_builtin_backends(Registry& registry) {
  cpu::register_cpu_backends(registry);
  // Ring attention (issue 10) on simulated ranks: the CUDA ring's schedule and merge, on the CPU.
  registry.add("cpu-ring", ring::make_cpu_ring_backend);
#if ATTNSUITE_HAVE_CUDA
  cuda::register_cuda_backends(registry);
#endif
#if ATTNSUITE_HAVE_NCCL
  // Context-parallel ring attention over the visible GPUs (issue 10; built with nccl.h, loads
  // libnccl.so.2 when asked).
  registry.add("ring", cuda::make_ring_backend);
#endif
#if ATTNSUITE_HAVE_PEERS
  peers::register_peer_backends(registry);
#endif
}

}  // namespace attnsuite
