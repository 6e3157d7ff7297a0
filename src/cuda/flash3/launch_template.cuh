// Launch of one flash3 configuration. Included only by the instantiation TUs.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/flash3/kernel.cuh"
#include "cuda/flash3/run_forward.cuh"
#include "cuda/flash3/tensor_map.hpp"
#include "cuda/flash3/traits.cuh"
#include "cuda/flash3/work_grid.hpp"

namespace attnsuite::cuda::flash3 {

template <class Kernel>
void run_kernel(const Params& params, cudaStream_t stream) {
  constexpr DType kDType = std::is_same_v<typename Kernel::Element, __half> ? DType::F16 : DType::BF16;
  const OperandMaps maps = operand_maps(params, kDType, false, 64, Kernel::kTileM, Kernel::kTileN);
  Params launch = params;
  const int ctas = work_grid(launch, Kernel::kTileM, Kernel::kOrder, "flash3");
  launch_kernel(flash3_forward_kernel<Kernel>, dim3(static_cast<unsigned>(ctas)), Kernel::kThreads, Kernel::kSmemBytes,
                stream, launch, maps.q, maps.k, maps.v);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3_forward_kernel");
}

template <class Element, int kHeadDim>
void run_forward(const Params& params, cudaStream_t stream) {
  run_kernel<typename Config<Element, kHeadDim>::Kernel>(params, stream);
}

template <template <class> class Config, class Element>
void run_forward_config(const Params& params, cudaStream_t stream) {
  run_kernel<typename Config<Element>::Kernel>(params, stream);
}

}  // namespace attnsuite::cuda::flash3
