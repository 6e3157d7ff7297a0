// The per-(dtype, head dim) entry points, each defined and explicitly instantiated in its own
// translation unit (forward_<dtype>_d<head dim>.cu) so the six compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash3/params.hpp"

namespace attnsuite::cuda::flash3 {

template <class Element, int kHeadDim>
void run_forward(const Params& params, cudaStream_t stream);

// Kernel config "m192" (d64 only: three consumer warpgroups, 192-row Q tiles; traits.cuh
// ConfigM192), in forward_<dtype>_d64_m192.cu.
template <class Element>
void run_forward_m192(const Params& params, cudaStream_t stream);

// Kernel config "m192-fmaexp" (m192 with 1/8 of the exponentials on the FMA pipe; traits.cuh
// ConfigM192FmaExp2), in forward_<dtype>_d64_m192_fmaexp.cu.
template <class Element>
void run_forward_m192_fmaexp(const Params& params, cudaStream_t stream);

// Kernel config "n176" (d128 only: 176-key K/V tiles; traits.cuh ConfigN176), in
// forward_<dtype>_d128_n176.cu.
template <class Element>
void run_forward_n176(const Params& params, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
