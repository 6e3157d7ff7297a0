// Launch of flash2's backward for one (dtype, head dim): the preprocess, the main kernel, and
// the dQ conversion (atomic mode) or the dQ kernel (deterministic mode). Included only by the
// instantiation TUs (backward_<dtype>_d<head dim>.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/backward_preprocess.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/flash2/backward_kernel.cuh"
#include "cuda/flash2/backward_traits.cuh"
#include "cuda/flash2/run_backward.cuh"

namespace attnsuite::cuda::flash2 {

template <class Element, int kHeadDim, int kKeyTile>
void run_backward(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess) {
  using Main = typename BackwardConfig<Element, kHeadDim, kKeyTile>::Kernel;
  using Dq = typename BackwardConfig<Element, kHeadDim, kKeyTile>::DqKernel;
  if (vector_preprocess)
    launch_vector_preprocess(params, std::is_same_v<Element, __half> ? DType::F16 : DType::BF16, stream);
  else
    launch_backward_preprocess<Element>(params, stream);

  const dim3 key_grid(static_cast<unsigned>((params.seq_kv + Main::kTileN - 1) / Main::kTileN),
                      static_cast<unsigned>(params.heads_kv), static_cast<unsigned>(params.batch));
  if (params.dq_accum != nullptr) {
    launch_kernel(flash2_backward_kernel<Main, true>, key_grid, Main::kThreads, Main::kSmemBytes, stream, params);
    ATTNSUITE_CUDA_CHECK_LAUNCH("flash2_backward_kernel");
    launch_backward_convert_dq<Element>(params, stream);
  } else {
    launch_kernel(flash2_backward_kernel<Main, false>, key_grid, Main::kThreads, Main::kSmemBytes, stream, params);
    ATTNSUITE_CUDA_CHECK_LAUNCH("flash2_backward_kernel");
    launch_kernel(flash2_backward_dq_kernel<Dq>, query_tile_grid<Dq::kTileM>(params), Dq::kThreads, Dq::kSmemBytes,
                  stream, params);
    ATTNSUITE_CUDA_CHECK_LAUNCH("flash2_backward_dq_kernel");
  }
}

}  // namespace attnsuite::cuda::flash2
