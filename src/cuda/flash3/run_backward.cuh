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

// vector_preprocess: the preprocess with 16-byte accesses (launch_vector_preprocess; option
// backward_preprocess=vector), else one warp a row.
template <class Element, int kHeadDim, bool kWideEpilogue, int kHeadGroup = 1>
void run_backward(const BackwardParams& params, cudaStream_t stream, bool vector_preprocess);

// The preprocess with 16-byte accesses (common/backward_row_kernels.cuh) for params' dtype and head
// dim (64, 128), instantiated apart (backward_preprocess.cu) so that the backward's translation
// units keep their kernels.
void launch_vector_preprocess(const BackwardParams& params, DType dtype, cudaStream_t stream);

}  // namespace attnsuite::cuda::flash3
