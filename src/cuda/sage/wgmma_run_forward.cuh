// The per-(mode, dtype, head dim) entry points of sage's wgmma kernels, each explicitly
// instantiated in its own translation unit (wgmma_forward_<mode>_<dtype>_d<head dim>.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/sage/params.hpp"

namespace attnsuite::cuda::sage::wgmma {

// kSchedule: the consumers' schedule (params.hpp; configs "wgmma", "wgmma-pingpong", "wgmma-serial").
template <Mode kMode, class Element, int kHeadDim, Schedule kSchedule>
void run_forward(const Params& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::sage::wgmma
