// flash3's backward per (dtype, head dim, epilogue), each defined and explicitly instantiated in its
// own translation unit (backward_<dtype>_d<head dim>[_wide_epilogue].cu). kWideEpilogue: dK and dV
// stored 16 bytes a lane (d128's default; at d64 backward_epilogue=16-byte, experimental: not yet
// run on a GPU); kHeadGroup > 1: the grid's key tiles of that many heads interleaved (4: the
// default order, built with each head dim's default epilogue; backward_traits.cuh).
#pragma once

#include <cuda_runtime.h>

#include "attnsuite/dtype.hpp"
#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda::flash3 {

// vector_preprocess: the preprocess with 16-byte accesses (common/backward_preprocess.hpp; option
// backward_preprocess=vector), else one warp a row.
template <class Element, int kHeadDim, bool kWideEpilogue, int kHeadGroup = 1>
void run_backward(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess);

}  // namespace attnsuite::cuda::flash3
