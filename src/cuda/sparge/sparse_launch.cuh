// Launch of the block-sparse flash2 kernel for one (dtype, head dim). Included only by the
// instantiation TUs sparse_<dtype>_d<head dim>.cu.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/flash2/kernel.cuh"
#include "cuda/flash2/traits.cuh"
#include "cuda/sparge/launch.hpp"

namespace attnsuite::cuda::sparge {

template <class Element, int kHeadDim>
void run_block_sparse(const flash2::SparseParams& params, cudaStream_t stream) {
  using Kernel = flash2::BlockSparse<typename flash2::Config<Element, kHeadDim>::Kernel>;
  static_assert(Kernel::kTileM == tiles_for(kHeadDim).m && Kernel::kTileN == tiles_for(kHeadDim).n &&
                    Kernel::kRowsPerWarp == tiles_for(kHeadDim).rows_per_warp,
                "the block mask's tiles (tiles_for) must be flash2's");
  const auto kernel = flash2::flash2_block_sparse_kernel<Kernel>;
  ATTNSUITE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kernel::kSmemBytes));
  const dim3 grid(static_cast<unsigned>((params.seq_q + Kernel::kTileM - 1) / Kernel::kTileM),
                  static_cast<unsigned>(params.heads_q), static_cast<unsigned>(params.batch));
  kernel<<<grid, Kernel::kThreads, Kernel::kSmemBytes, stream>>>(params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash2_block_sparse_kernel");
}

}  // namespace attnsuite::cuda::sparge
