// Dispatch of flash3's backward from the run-time (dtype, head dim, epilogue, order) to the compiled
// instantiations.
#include "attnsuite/error.hpp"
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
      if (variant.grouped_heads) {
        if (!backward_variant_built(variant))
          throw Error(ErrorKind::Unsupported,
                      "flash3 backward: backward_order=grouped-4 is built with each head dim's default epilogue only");
        return run_backward<Element, kHeadDim, wide_epilogue(BackwardVariant{}, kHeadDim), 4>(
            params, cuda_stream, variant.vector_preprocess);
      }
      if (wide_epilogue(variant, kHeadDim))
        return run_backward<Element, kHeadDim, true>(params, cuda_stream, variant.vector_preprocess);
      run_backward<Element, kHeadDim, false>(params, cuda_stream, variant.vector_preprocess);
    });
  });
}

}  // namespace attnsuite::cuda::flash3
