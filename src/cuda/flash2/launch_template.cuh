// Launch of one flash2 configuration. Included only by the instantiation TUs.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/flash2/kernel.cuh"
#include "cuda/flash2/run_forward.cuh"
#include "cuda/flash2/traits.cuh"

namespace attnsuite::cuda::flash2 {

template <class Kernel>
void run_kernel(const Params& params, cudaStream_t stream) {
  const auto kernel = flash2_forward_kernel<Kernel>;
  // Per device and cheap (no synchronization): set on every launch rather than cached, so a
  // second GPU gets it too. Beyond 48 KiB, dynamic shared memory must be opted into.
  ATTNSUITE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSmemBytes));
  const dim3 grid(static_cast<unsigned>((params.seq_q + Kernel::kTileM - 1) / Kernel::kTileM),
                  static_cast<unsigned>(params.heads_q), static_cast<unsigned>(params.batch));
  kernel<<<grid, Kernel::kThreads, Kernel::kSmemBytes, stream>>>(params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash2_forward_kernel");
}

template <class Element, int kHeadDim>
void run_forward(const Params& params, cudaStream_t stream) {
  run_kernel<typename Config<Element, kHeadDim>::Kernel>(params, stream);
}

}  // namespace attnsuite::cuda::flash2
