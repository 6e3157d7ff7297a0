// Dispatch from the run-time (mode, dtype, head dim) to sage's compiled wgmma instantiations,
// and the check that TMA can read the operands. Host code.
#include "cuda/sage/wgmma_launch.hpp"

#include <fmt/format.h>

#include "attnsuite/error.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/hopper/tensor_map.hpp"
#include "cuda/sage/wgmma_run_forward.cuh"

namespace attnsuite::cuda::sage {
namespace {

template <Mode kMode, class Element, int kHeadDim>
void launch_for_schedule(const Params& params, Schedule schedule, int fma_exp2_every, cudaStream_t stream) {
  if (fma_exp2_every != 0) {
    if constexpr (kMode == Mode::Sage2)
      if (schedule == Schedule::PingPong && fma_exp2_every == 8)
        return wgmma::run_forward<kMode, Element, kHeadDim, Schedule::PingPong, 8>(params, stream);
    throw Error(ErrorKind::Internal, fmt::format("sage: no wgmma kernel with 1/{} of the exponentials on FMA for "
                                                 "this mode and schedule (sage2 ping-pong, 1/8 only)",
                                                 fma_exp2_every));
  }
  switch (schedule) {
    case Schedule::Overlap:
      return wgmma::run_forward<kMode, Element, kHeadDim, Schedule::Overlap>(params, stream);
    case Schedule::PingPong:
      return wgmma::run_forward<kMode, Element, kHeadDim, Schedule::PingPong>(params, stream);
    case Schedule::Serial:
      return wgmma::run_forward<kMode, Element, kHeadDim, Schedule::Serial>(params, stream);
  }
  throw Error(ErrorKind::Internal, fmt::format("sage: schedule {} unknown", static_cast<int>(schedule)));
}

template <Mode kMode>
void launch_for_mode(const Params& params, DType dtype, Schedule schedule, int fma_exp2_every, cudaStream_t stream) {
  dispatch_16bit(dtype, "sage's wgmma kernel", [&](auto element) {
    dispatch_head_dim<64, 128>(params.head_dim, "sage's wgmma kernel", [&](auto head_dim) {
      launch_for_schedule<kMode, typename decltype(element)::type, decltype(head_dim)::value>(params, schedule,
                                                                                              fma_exp2_every, stream);
    });
  });
}

}  // namespace

std::string wgmma_layout_problem(Mode mode, const Params& params) {
  if (params.seq_q == 0 || params.seq_kv == 0 || params.batch == 0 || params.heads_q == 0)
    return "an empty dimension (no TMA descriptor for it)";
  if (mode == Mode::Sage2) return {};
  const std::string v =
      hopper::tma_layout_problem(params.v, params.v_batch_stride, params.v_row_stride, params.v_head_stride);
  return v.empty() ? v : "V: " + v;
}

void launch_forward_wgmma(Mode mode, const Params& params, DType dtype, Schedule schedule, int fma_exp2_every,
                          void* stream) {
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (mode == Mode::Sage) return launch_for_mode<Mode::Sage>(params, dtype, schedule, fma_exp2_every, cuda_stream);
  return launch_for_mode<Mode::Sage2>(params, dtype, schedule, fma_exp2_every, cuda_stream);
}

}  // namespace attnsuite::cuda::sage
