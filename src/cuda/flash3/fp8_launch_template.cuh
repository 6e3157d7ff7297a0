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

namespace attnsuite::cuda::flash3 {

template <int kHeadDim>
void run_fp8_forward(const Params& params, const float* descales, cudaStream_t stream) {
  using Kernel = typename Fp8Config<kHeadDim>::Kernel;
  // e4m3: one box covers the whole row (64 or 128 bytes).
  const OperandMaps maps = operand_maps(params, DType::BF16, true, kHeadDim, Kernel::kTileM, Kernel::kTileN);
  launch_kernel(flash3_fp8_forward_kernel<Kernel>, query_tile_grid<Kernel::kTileM>(params), Kernel::kThreads,
                Kernel::kSmemBytes, stream, params, descales, maps.q, maps.k, maps.v);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3_fp8_forward_kernel");
}

}  // namespace attnsuite::cuda::flash3
