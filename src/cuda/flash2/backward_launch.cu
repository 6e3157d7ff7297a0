// Dispatch of flash2's backward from the run-time (dtype, head dim) to the compiled
// instantiations.
#include "cuda/common/dispatch.hpp"
#include "cuda/flash2/launch.hpp"
#include "cuda/flash2/run_backward.cuh"

namespace attnsuite::cuda::flash2 {

void launch_backward(const BackwardParams& params, DType dtype, BackwardMain main, bool vector_preprocess,
                     void* stream) {
  dispatch_16bit(dtype, "flash2 backward", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "flash2 backward", [&](auto head_dim) {
      using Element = typename decltype(element)::type;
      constexpr int kHeadDim = decltype(head_dim)::value;
      const auto cuda_stream = static_cast<cudaStream_t>(stream);
      if (main == BackwardMain::Tiles)
        run_tiled_backward<Element, kHeadDim>(params, cuda_stream, vector_preprocess);
      else if (main == BackwardMain::KeyRows128)
        run_backward<Element, kHeadDim, 128>(params, cuda_stream, vector_preprocess);
      else
        run_backward<Element, kHeadDim, 64>(params, cuda_stream, vector_preprocess);
    });
  });
}

}  // namespace attnsuite::cuda::flash2
