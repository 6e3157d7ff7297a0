// Launch of the block-sparse flash2 kernel for one (dtype, head dim). Included only by the
// instantiation TUs sparse_<dtype>_d<head dim>.cu.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
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
  launch_kernel(flash2::flash2_block_sparse_kernel<Kernel>, query_tile_grid<Kernel::kTileM>(params), Kernel::kThreads,
                Kernel::kSmemBytes, stream, params);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash2_block_sparse_kernel");
}

}  // namespace attnsuite::cuda::sparge
