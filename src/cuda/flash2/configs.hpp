// flash2's alternative configurations for `attnsuite tune --kernels` (host-visible; no CUDA
// headers). "default" is Config<> of traits.cuh; each alternative is compiled in its own
// translation unit (config_<name>_d<head dim>.cu) for fp16 and bf16.
#pragma once

#include "cuda/common/pointer_range.hpp"
#include "cuda/flash2/params.hpp"

namespace attnsuite::cuda::flash2 {

struct AlternativeConfig {
  const char* name;  // "m64"
  int head_dim;
  void (*launch_fp16)(const Params& params, void* stream);
  void (*launch_bf16)(const Params& params, void* stream);
};

// Every alternative configuration compiled into this build.
using AlternativeConfigs = PointerRange<AlternativeConfig>;
AlternativeConfigs alternative_configs();

}  // namespace attnsuite::cuda::flash2
