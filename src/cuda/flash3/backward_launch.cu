// Dispatch of flash3's backward from the run-time (dtype, head dim, epilogue) to the compiled
// instantiations.
#include "cuda/common/dispatch.hpp"
#include "cuda/flash3/launch.hpp"
#include "cuda/flash3/run_backward.cuh"

namespace attnsuite::cuda::flash3 {

void launch_backward(const BackwardParams& params, DType dtype, BackwardVariant variant, void* stream) {
  dispatch_16bit(dtype, "flash3 backward", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "flash3 backward", [&](auto head_dim) {
      using Element = typename decltype(element)::type;
      constexpr int kHeadDim = decltype(head_dim)::value;
      const auto cuda_stream = static_cast<cudaStream_t>(stream);
      if (wide_epilogue(variant, kHeadDim)) return run_backward<Element, kHeadDim, true>(params, cuda_stream);
      run_backward<Element, kHeadDim, false>(params, cuda_stream);
    });
  });
}

}  // namespace attnsuite::cuda::flash3
