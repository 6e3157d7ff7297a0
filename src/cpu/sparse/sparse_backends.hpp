// The options the sparse backends (CPU and CUDA) share, and the CPU backends' factories.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "attnsuite/backend.hpp"
#include "sparse/sparse.hpp"

namespace attnsuite::sparse {

// Backend options: "sparse_config" = a tuned config file (predicted backends; empty: the
// defaults of HeadSettings) and "block_mask" = a mask spec (block-sparse backends,
// make_block_mask). Both arrive through Backend::set_option from the suite's
// "backend_options" or bench's --sparse-config / --block-mask.
struct SparseOptions {
  SparseConfig config;
  std::string config_path;  // for messages; empty: defaults
  std::string mask_spec = "dense";  // block-sparse without --block-mask computes every block

  // Backend::set_option for a predicted (sparge) or given-mask (block-sparse) backend.
  bool set(std::string_view key, const std::string& value, bool predicted);
  Support supports(const AttentionProblem& problem, bool predicted) const;
};

std::unique_ptr<Backend> make_cpu_sparge_backend();
std::unique_ptr<Backend> make_cpu_block_sparse_backend();

}  // namespace attnsuite::sparse
