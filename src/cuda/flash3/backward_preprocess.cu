// flash3's backward preprocess with 16-byte accesses (backward_preprocess=vector, the default;
// 44 µs against the warp kernel's 117 on the H100), in a translation unit of its own so the backward's
// instantiation units keep their kernels.
#include "cuda/common/backward_row_kernels.cuh"
#include "cuda/common/dispatch.hpp"
#include "cuda/flash3/run_backward.cuh"

namespace attnsuite::cuda::flash3 {

void launch_vector_preprocess(const BackwardParams& params, DType dtype, cudaStream_t stream) {
  dispatch_16bit(dtype, "flash3 backward preprocess", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "flash3 backward preprocess", [&](auto head_dim) {
      launch_backward_preprocess_vector<typename decltype(element)::type, decltype(head_dim)::value>(params, stream);
    });
  });
}

}  // namespace attnsuite::cuda::flash3
