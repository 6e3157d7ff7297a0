// Dispatch from the run-time (dtype, head dim) to the compiled instantiations.
#include "cuda/common/dispatch.hpp"
#include "cuda/flash2/launch.hpp"
#include "cuda/flash2/run_forward.cuh"

namespace attnsuite::cuda::flash2 {

void launch_forward(const Params& params, DType dtype, void* stream) {
  dispatch_16bit(dtype, "flash2", [&](auto element) {
    dispatch_head_dim<64, 128, 256>(params.head_dim, "flash2", [&](auto head_dim) {
      run_forward<typename decltype(element)::type, decltype(head_dim)::value>(params,
                                                                               static_cast<cudaStream_t>(stream));
    });
  });
}

}  // namespace attnsuite::cuda::flash2
