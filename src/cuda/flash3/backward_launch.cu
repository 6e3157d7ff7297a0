// Dispatch of flash3's backward from the run-time (dtype, head dim) to the compiled instantiations.
#include "cuda/common/dispatch.hpp"
#include "cuda/flash3/launch.hpp"
#include "cuda/flash3/run_backward.cuh"

namespace attnsuite::cuda::flash3 {

void launch_backward(const BackwardParams& params, DType dtype, BackwardVariant variant, void* stream) {
  dispatch_16bit(dtype, "flash3 backward", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "flash3 backward", [&](auto head_dim) {
      using Element = typename decltype(element)::type;
      constexpr int kHeadDim = decltype(head_dim)::value;
      const auto run = [&](auto bulk_dq, auto ds_buffers) {
        run_backward<Element, kHeadDim, decltype(bulk_dq)::value, decltype(ds_buffers)::value>(
            params, static_cast<cudaStream_t>(stream));
      };
      using One = std::integral_constant<int, 1>;
      using Two = std::integral_constant<int, 2>;
      if (variant.ds_buffers == 2)
        variant.bulk_dq ? run(std::true_type{}, Two{}) : run(std::false_type{}, Two{});
      else
        variant.bulk_dq ? run(std::true_type{}, One{}) : run(std::false_type{}, One{});
    });
  });
}

}  // namespace attnsuite::cuda::flash3
