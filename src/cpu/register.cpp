#include "cpu/common.hpp"
#include "cpu/cpu_backends.hpp"
#include "cpu/sparse/sparse_backends.hpp"

namespace attnsuite::cpu {

// The order here is the order `attnsuite list` shows: ground truth, baseline, the fast one.
void register_cpu_backends(Registry& registry) {
  registry.add("reference", make_reference_backend);
  registry.add("cpu-vanilla", make_vanilla_backend);
  registry.add("cpu-flash", make_flash_backend);
  // Block-sparse attention on the CPU (issue 6): the predictor and a given mask.
  registry.add("cpu-sparge", sparse::make_cpu_sparge_backend);
  registry.add("cpu-block-sparse", sparse::make_cpu_block_sparse_backend);
}

}  // namespace attnsuite::cpu
