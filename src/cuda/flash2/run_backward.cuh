// The backward's per-(dtype, head dim) entry points, each defined and explicitly instantiated in
// its own translation unit (backward_<dtype>_d<head dim>.cu: the key-row kernel, both key tiles;
// backward_tiles_<dtype>_d<head dim>.cu: the tiled kernel).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash2/params.hpp"

namespace attnsuite::cuda::flash2 {

// kKeyTile: keys per CTA of the key-row main kernel (64 or 128; backward_traits.cuh
// BackwardConfig); vector_preprocess: the preprocess with 16-byte accesses
// (common/backward_preprocess.hpp; option backward_preprocess=vector, the default), else one warp
// a row.
template <class Element, int kHeadDim, int kKeyTile>
void run_backward(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess);

// The same with the tiled main kernel (backward_split=tiles; TiledBackwardConfig).
template <class Element, int kHeadDim>
void run_tiled_backward(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess);

}  // namespace attnsuite::cuda::flash2
