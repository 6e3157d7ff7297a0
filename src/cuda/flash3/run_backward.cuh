// flash3's backward per (dtype, head dim), each defined and explicitly instantiated in its own
// translation unit (backward_<dtype>_d<head dim>.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda::flash3 {

template <class Element, int kHeadDim>
void run_backward(const BackwardParams& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
