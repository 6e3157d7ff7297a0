// flash3-fp8's kernel of each work order (fp8_run_forward.cuh). Host code only.
#include "cuda/flash3/fp8_run_forward.cuh"

namespace attnsuite::cuda::flash3 {
namespace {

template <int kHeadDim>
void run_ordered(const Params& params, const float* descales, Fp8Order order, cudaStream_t stream) {
  switch (order) {
    case Fp8Order::Grid:
      return run_fp8_forward<kHeadDim>(params, descales, stream);
    case Fp8Order::HeadMajor:
      return run_fp8_forward<kHeadDim, true, hopper::WorkOrder::HeadMajor>(params, descales, stream);
    case Fp8Order::Paired:
      return run_fp8_forward<kHeadDim, true, hopper::WorkOrder::Paired>(params, descales, stream);
  }
}

}  // namespace

void run_fp8_ordered(const Params& params, const float* descales, Fp8Order order, cudaStream_t stream) {
  if (params.head_dim == 64) return run_ordered<64>(params, descales, order, stream);
  run_ordered<128>(params, descales, order, stream);
}

}  // namespace attnsuite::cuda::flash3
