// The backward's preprocess with 16-byte accesses (backward_row_kernels.cuh,
// backward_preprocess_vector_kernel) for a dtype and head dim (64, 128) chosen at run time, in a
// translation unit of its own (backward_preprocess.cu) so that the backends' instantiation units
// keep their kernels: flash3's default and flash2's (both hold the rows of O and dO to 16-byte
// alignment).
#pragma once

#include <cuda_runtime.h>

#include "attnsuite/dtype.hpp"
#include "cuda/common/kernel_params.hpp"

namespace attnsuite::cuda {

void launch_vector_preprocess(const BackwardParams& params, DType dtype, cudaStream_t stream);

}  // namespace attnsuite::cuda
