// Dispatch of flash2's backward from the run-time (dtype, head dim) to the compiled
// instantiations.
#include "cuda/common/dispatch.hpp"
#include "cuda/flash2/launch.hpp"
#include "cuda/flash2/run_backward.cuh"

namespace attnsuite::cuda::flash2 {

void launch_backward(const BackwardParams& params, DType dtype, void* stream) {
  dispatch_16bit(dtype, "flash2 backward", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "flash2 backward", [&](auto head_dim) {
      run_backward<typename decltype(element)::type, decltype(head_dim)::value>(params,
                                                                                static_cast<cudaStream_t>(stream));
    });
  });
}

}  // namespace attnsuite::cuda::flash2
