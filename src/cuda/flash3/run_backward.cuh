// flash3's backward per (dtype, head dim, dQ reduction, dSᵀ buffers), defined and explicitly instantiated per
// (dtype, head dim) and buffer count in its own translation unit (backward_<dtype>_d<head dim>[_ds2].cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda::flash3 {

template <class Element, int kHeadDim, bool kBulkDq, int kDsBuffers>
void run_backward(const BackwardParams& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
