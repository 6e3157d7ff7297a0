// Launch of flash2's backward for one (dtype, head dim): the preprocess, the main kernel (the
// key-row one of backward_kernel.cuh or the tiled one of backward_tiles_kernel.cuh), and the dQ
// conversion (atomic mode) or the dQ kernel (deterministic mode). Included only by the
// instantiation TUs (backward_<dtype>_d<head dim>.cu, backward_tiles_<dtype>_d<head dim>.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/backward_preprocess.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/launch.cuh"
#include "cuda/flash2/backward_kernel.cuh"
#include "cuda/flash2/backward_tiles_kernel.cuh"
#include "cuda/flash2/backward_traits.cuh"
#include "cuda/flash2/run_backward.cuh"

namespace attnsuite::cuda::flash2 {

// The three launches around a main kernel with traits Main: kAtomicKernel adds dQ into the
// workspace's sums (then converted), kPlainKernel leaves dQ to the deterministic dQ kernel (Dq).
template <class Element, class Main, class Dq, auto kAtomicKernel, auto kPlainKernel>
void run_backward_kernels(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess) {
  if (vector_preprocess)
    launch_vector_preprocess(params, std::is_same_v<Element, __half> ? DType::F16 : DType::BF16, stream);
  else
    launch_backward_preprocess<Element>(params, stream);

  const dim3 key_grid(static_cast<unsigned>((params.seq_kv + Main::kTileN - 1) / Main::kTileN),
                      static_cast<unsigned>(params.heads_kv), static_cast<unsigned>(params.batch));
  if (params.dq_accum != nullptr) {
    launch_kernel(kAtomicKernel, key_grid, Main::kThreads, Main::kSmemBytes, stream, params);
    ATTNSUITE_CUDA_CHECK_LAUNCH("flash2's backward main kernel");
    launch_backward_convert_dq<Element>(params, stream);
  } else {
    launch_kernel(kPlainKernel, key_grid, Main::kThreads, Main::kSmemBytes, stream, params);
    ATTNSUITE_CUDA_CHECK_LAUNCH("flash2's backward main kernel");
    launch_kernel(flash2_backward_dq_kernel<Dq>, query_tile_grid<Dq::kTileM>(params), Dq::kThreads, Dq::kSmemBytes,
                  stream, params);
    ATTNSUITE_CUDA_CHECK_LAUNCH("flash2_backward_dq_kernel");
  }
}

template <class Element, int kHeadDim, int kKeyTile>
void run_backward(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess) {
  using Config = BackwardConfig<Element, kHeadDim, kKeyTile>;
  using Main = typename Config::Kernel;
  run_backward_kernels<Element, Main, typename Config::DqKernel, flash2_backward_kernel<Main, true>,
                       flash2_backward_kernel<Main, false>>(params, stream, vector_preprocess);
}

template <class Element, int kHeadDim>
void run_tiled_backward(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess) {
  using Config = TiledBackwardConfig<Element, kHeadDim>;
  using Main = typename Config::Kernel;
  run_backward_kernels<Element, Main, typename Config::DqKernel, flash2_backward_tiles_kernel<Main, true>,
                       flash2_backward_tiles_kernel<Main, false>>(params, stream, vector_preprocess);
}

}  // namespace attnsuite::cuda::flash2
