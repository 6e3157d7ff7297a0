// Launch of one flash2 configuration. Included only by the instantiation TUs.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/flash2/kernel.cuh"
#include "cuda/flash2/run_forward.cuh"
#include "cuda/flash2/traits.cuh"

namespace attnsuite::cuda::flash2 {

template <class Kernel>
void run_kernel(const Params& params, cudaStream_t stream) {
  launch_kernel(flash2_forward_kernel<Kernel>, query_tile_grid<Kernel::kTileM>(params), Kernel::kThreads,
                Kernel::kSmemBytes, stream, params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash2_forward_kernel");
}

template <class Element, int kHeadDim>
void run_forward(const Params& params, cudaStream_t stream) {
  run_kernel<typename Config<Element, kHeadDim>::Kernel>(params, stream);
}

}  // namespace attnsuite::cuda::flash2
