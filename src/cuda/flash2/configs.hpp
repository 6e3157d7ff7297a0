// flash2's alternative configurations for `attnsuite tune --kernels` (host-visible; no CUDA
// headers). "default" is Config<> of traits.cuh; each alternative is compiled in its own
// translation unit (config_<name>_d<head dim>.cu) for fp16 and bf16.
#pragma once

#include <cstddef>

#include "cuda/flash2/params.hpp"

namespace attnsuite::cuda::flash2 {

struct AlternativeConfig {
  const char* name;  // "m64"
  int head_dim;
  void (*launch_fp16)(const Params& params, void* stream);
  void (*launch_bf16)(const Params& params, void* stream);
};

// Every alternative configuration compiled into this build (a range for `for`; the .cu files
// that include this header are C++17, so no std::span).
struct AlternativeConfigs {
  const AlternativeConfig* first;
  std::size_t count;
  const AlternativeConfig* begin() const { return first; }
  const AlternativeConfig* end() const { return first + count; }
};
AlternativeConfigs alternative_configs();

}  // namespace attnsuite::cuda::flash2
