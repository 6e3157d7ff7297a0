// The per-head-dim flash3-fp8 entry points, each explicitly instantiated in its own translation
// unit (forward_e4m3_d<head dim>.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash3/params.hpp"

namespace attnsuite::cuda::flash3 {

// params.q/k/v point at e4m3 tensors (strides in elements = bytes, 16-byte multiples: TMA);
// descales (device) at descale q, k, v.
template <int kHeadDim>
void run_fp8_forward(const Params& params, const float* descales, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
