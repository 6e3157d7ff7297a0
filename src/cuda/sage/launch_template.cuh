// Launch of one sage configuration. Included only by the instantiation TUs.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/sage/kernel.cuh"
#include "cuda/sage/run_forward.cuh"
#include "cuda/sage/traits.cuh"

namespace attnsuite::cuda::sage {

template <class Kernel>
void run_kernel(const Params& params, cudaStream_t stream) {
  launch_kernel(sage_forward_kernel<Kernel>, query_tile_grid<Kernel::kTileM>(params), Kernel::kThreads,
                Kernel::kSmemBytes, stream, params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("sage_forward_kernel");
}

template <Mode kMode, class Element, int kHeadDim>
void run_forward(const Params& params, cudaStream_t stream) {
  run_kernel<typename Config<kMode, Element, kHeadDim>::Kernel>(params, stream);
}

}  // namespace attnsuite::cuda::sage
