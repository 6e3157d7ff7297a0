// The per-(dtype, head dim) entry points, each defined and explicitly instantiated in its own
// translation unit (forward_<dtype>_d<head dim>.cu) so the six compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash3/params.hpp"

namespace attnsuite::cuda::flash3 {

template <class Element, int kHeadDim>
void run_forward(const Params& params, cudaStream_t stream);

// A config's kernel: Config is its traits.cuh config template (ConfigM192, ConfigM192FmaExp2,
// ConfigN176; the longest-first ones ConfigM192LongestFirst, ConfigD64LongestFirst,
// ConfigD128LongestFirst; the paired ones ConfigM192Paired, ConfigD128Paired), instantiated in
// forward_<dtype>_d<head dim>_<config>.cu.
template <template <class> class Config, class Element>
void run_forward_config(const Params& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
