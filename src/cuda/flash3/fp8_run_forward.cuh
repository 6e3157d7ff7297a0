// The flash3-fp8 entry points, each explicitly instantiated in its own translation unit
// (forward_e4m3_d<head dim>[_persistent|_paired].cu), and the choice among them.
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash3/fp8_launch.hpp"
#include "cuda/flash3/params.hpp"
#include "cuda/hopper/work_order.hpp"

namespace attnsuite::cuda::flash3 {

// params.q/k/v point at e4m3 tensors (strides in elements = bytes, 16-byte multiples: TMA);
// descales (device) at descale q, k, v. kPersistent false: one CTA per query tile (the grid);
// true: the works of kOrder (HeadMajor or Paired) from a 1-D grid (fp8_traits.cuh).
template <int kHeadDim, bool kPersistent = false, hopper::WorkOrder kOrder = hopper::WorkOrder::HeadMajor>
void run_fp8_forward(const Params& params, const float* descales, cudaStream_t stream);

// The kernel of `order` (fp8_launch.hpp) at params.head_dim (64 or 128; the callers check). Host
// code in its own TU (fp8_order.cpp): a definition here would instantiate every kernel in every
// TU that includes the launch template.
void run_fp8_ordered(const Params& params, const float* descales, Fp8Order order, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
