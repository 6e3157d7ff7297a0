// The per-(mode, dtype, head dim) entry points, each defined and explicitly instantiated in its
// own translation unit (forward_<mode>_<dtype>_d<head dim>.cu) so that they compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "cuda/sage/params.hpp"

namespace attnsuite::cuda::sage {

template <Mode kMode, class Element, int kHeadDim>
void run_forward(const Params& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::sage
