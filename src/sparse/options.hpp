// The options every sparse backend (CPU and CUDA) takes, parsed once for all of them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "attnsuite/backend.hpp"
#include "sparse/sparse.hpp"

namespace attnsuite::sparse {

// Backend options: "sparse_config" = a tuned config file (predicted backends; empty: the
// defaults of HeadSettings) and "block_mask" = a mask spec (block-sparse backends,
// make_block_mask); "sparse_config_json" is the sparse tuner's candidate, inline. They arrive in
// PlanOptions::options from the suite's "backend_options" or bench's --sparse-config / --block-mask.
struct SparseOptions {
  SparseConfig config;
  std::string config_path;          // for messages; empty: defaults
  std::string mask_spec = "dense";  // block-sparse without --block-mask computes every block

  // The option keys of a predicted (sparge) or given-mask (block-sparse) backend.
  static std::vector<std::string> keys(bool predicted);
  // Reads those keys of `options` (others are ignored); Error(Usage) for a bad value.
  static SparseOptions parse(const std::map<std::string, std::string>& options, bool predicted);
  Support supports(const AttentionProblem& problem, bool predicted) const;
};

}  // namespace attnsuite::sparse
