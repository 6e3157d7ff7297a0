#include "cpu/common.hpp"
#include "cpu/cpu_backends.hpp"

namespace attnsuite::cpu {

// The order here is the order `attnsuite list` shows: ground truth, baseline, the fast one.
void register_cpu_backends(Registry& registry) {
  registry.add("reference", make_reference_backend);
  registry.add("cpu-vanilla", make_vanilla_backend);
  registry.add("cpu-flash", make_flash_backend);
}

}  // namespace attnsuite::cpu
