// Dispatch of flash3's backward from the run-time (dtype, head dim) to the compiled instantiations.
#include "cuda/common/dispatch.hpp"
#include "cuda/flash3/launch.hpp"
#include "cuda/flash3/run_backward.cuh"

namespace attnsuite::cuda::flash3 {

void launch_backward(const BackwardParams& params, DType dtype, bool wide_epilogue, void* stream) {
  dispatch_16bit(dtype, "flash3 backward", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "flash3 backward", [&](auto head_dim) {
      using Element = typename decltype(element)::type;
      constexpr int kHeadDim = decltype(head_dim)::value;
      if (wide_epilogue) return run_backward<Element, kHeadDim, true>(params, static_cast<cudaStream_t>(stream));
      run_backward<Element, kHeadDim>(params, static_cast<cudaStream_t>(stream));
    });
  });
}

}  // namespace attnsuite::cuda::flash3
