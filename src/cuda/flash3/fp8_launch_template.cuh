// Launch of one flash3-fp8 configuration. Included only by the instantiation TUs.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/flash3/fp8_kernel.cuh"
#include "cuda/flash3/fp8_run_forward.cuh"
#include "cuda/flash3/fp8_traits.cuh"
#include "cuda/flash3/tensor_map.hpp"
#include "cuda/flash3/work_grid.hpp"

namespace attnsuite::cuda::flash3 {

template <int kHeadDim, bool kPersistent, hopper::WorkOrder kOrder>
void run_fp8_forward(const Params& params, const float* descales, cudaStream_t stream) {
  using Kernel = typename Fp8Config<kHeadDim, kPersistent, kOrder>::Kernel;
  // e4m3: one box covers the whole row (64 or 128 bytes).
  const OperandMaps maps = operand_maps(params, DType::BF16, true, kHeadDim, Kernel::kTileM, Kernel::kTileN);
  if constexpr (kPersistent) {
    // Works from the schedule (fp8_kernel.cuh, Fp8Schedule): a 1-D grid, params.persistent says
    // whether CTAs loop (min(works, SMs)) or each runs one work.
    Params launch = params;
    const int ctas = work_grid(launch, Kernel::kTileM, kOrder, "flash3-fp8");
    launch_kernel(flash3_fp8_forward_kernel<Kernel>, dim3(static_cast<unsigned>(ctas)), Kernel::kThreads,
                  Kernel::kSmemBytes, stream, launch, descales, maps.q, maps.k, maps.v);
  } else {
    launch_kernel(flash3_fp8_forward_kernel<Kernel>, query_tile_grid<Kernel::kTileM>(params), Kernel::kThreads,
                  Kernel::kSmemBytes, stream, params, descales, maps.q, maps.k, maps.v);
  }
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3_fp8_forward_kernel");
}

}  // namespace attnsuite::cuda::flash3
