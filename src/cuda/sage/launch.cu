// Dispatch from the run-time (mode, dtype, head dim) to the compiled instantiations.
#include "cuda/common/dispatch.hpp"
#include "cuda/sage/launch.hpp"
#include "cuda/sage/run_forward.cuh"

namespace attnsuite::cuda::sage {
namespace {

template <Mode kMode>
void launch_for_mode(const Params& params, DType dtype, cudaStream_t stream) {
  dispatch_16bit(dtype, "sage", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "sage", [&](auto head_dim) {
      run_forward<kMode, typename decltype(element)::type, decltype(head_dim)::value>(params, stream);
    });
  });
}

}  // namespace

void launch_forward(Mode mode, const Params& params, DType dtype, void* stream) {
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (mode == Mode::Sage) return launch_for_mode<Mode::Sage>(params, dtype, cuda_stream);
  return launch_for_mode<Mode::Sage2>(params, dtype, cuda_stream);
}

}  // namespace attnsuite::cuda::sage
