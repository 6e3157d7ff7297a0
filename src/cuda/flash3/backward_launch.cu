// Dispatch of flash3's backward from the run-time (dtype, head dim, variant) to the compiled
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
      if (variant.query_tile == 128) {
        if constexpr (kHeadDim == 64)
          if (!variant.wide_epilogue) {
            if (variant.tile_major) return run_backward<Element, 64, false, 128, true>(params, cuda_stream);
            return run_backward<Element, 64, false, 128>(params, cuda_stream);
          }
        throw Error(ErrorKind::Unsupported,
                    "flash3 backward: 128-query tiles are built for head dim 64 with the 4-byte epilogue only");
      }
      if (variant.wide_epilogue) {
        if (variant.tile_major)
          throw Error(ErrorKind::Unsupported,
                      "flash3 backward: the 16-byte epilogue is built with the head-major order only");
        return run_backward<Element, kHeadDim, true>(params, cuda_stream);
      }
      if (variant.tile_major) return run_backward<Element, kHeadDim, false, 64, true>(params, cuda_stream);
      run_backward<Element, kHeadDim>(params, cuda_stream);
    });
  });
}

}  // namespace attnsuite::cuda::flash3
