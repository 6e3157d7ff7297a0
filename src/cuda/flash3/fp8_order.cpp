// flash3-fp8's choice of kernel by forward order (fp8_run_forward.cuh). Host code only.
#include "cuda/flash3/fp8_run_forward.cuh"

namespace attnsuite::cuda::flash3 {
namespace {

// Causal problems (the host folds causal into window_right = 0) in paired units (a head's longest
// and shortest query tiles), one CTA per unit — as measured; flash3 caps its paired grid at the
// SMs, which this kernel has not yet run with; unmasked ones on min(works, SMs) looping CTAs; the
// other masked ones one CTA per work, head-major (a static round-robin leaves long masked works
// unbalanced: flash3's measurement, hopper/scheduler.cuh).
template <int kHeadDim>
void run_ordered(Params params, const float* descales, Fp8Order order, cudaStream_t stream) {
  if (order == Fp8Order::Grid) return run_fp8_forward<kHeadDim>(params, descales, stream);
  const bool causal = params.window_right == 0;
  params.persistent = !causal && params.window_left < 0 && params.window_right < 0;
  if (causal) return run_fp8_forward<kHeadDim, true, hopper::WorkOrder::Paired>(params, descales, stream);
  run_fp8_forward<kHeadDim, true, hopper::WorkOrder::HeadMajor>(params, descales, stream);
}

}  // namespace

void run_fp8_ordered(const Params& params, const float* descales, Fp8Order order, cudaStream_t stream) {
  if (params.head_dim == 64) return run_ordered<64>(params, descales, order, stream);
  run_ordered<128>(params, descales, order, stream);
}

}  // namespace attnsuite::cuda::flash3
