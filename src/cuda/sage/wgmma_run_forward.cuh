// The per-(mode, dtype, head dim) entry points of sage's wgmma kernels, each explicitly
// instantiated in its own translation unit (wgmma_forward_<mode>_<dtype>_d<head dim>.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/sage/params.hpp"

namespace attnsuite::cuda::sage::wgmma {

// kSchedule: the consumers' schedule (params.hpp; configs "wgmma", "wgmma-pingpong", "wgmma-serial");
// kFmaExp2Every: 0, or 8 for sage2's "wgmma-pingpong-fmaexp" (1/8 of the exponentials on FMA).
template <Mode kMode, class Element, int kHeadDim, Schedule kSchedule, int kFmaExp2Every = 0>
void run_forward(const Params& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::sage::wgmma
