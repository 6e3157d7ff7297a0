// flash3's backward per (dtype, head dim, dQ reduction), each defined and explicitly instantiated in its own
// translation unit (backward_<dtype>_d<head dim>[_dq_staged|_dq_bulk].cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/kernel_params.hpp"
#include "cuda/flash3/launch.hpp"

namespace attnsuite::cuda::flash3 {

template <class Element, int kHeadDim, DqReduction kDq>
void run_backward(const BackwardParams& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
