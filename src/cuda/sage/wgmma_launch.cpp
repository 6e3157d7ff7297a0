// Dispatch from the run-time (mode, dtype, head dim) to sage's compiled wgmma instantiations,
// and the check that TMA can read the operands. Host code.
#include "cuda/sage/wgmma_launch.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include "attnsuite/error.hpp"
#include "cuda/flash3/tensor_map.hpp"
#include "cuda/sage/wgmma_run_forward.cuh"

namespace attnsuite::cuda::sage {
namespace {

template <Mode kMode, class Element, int kHeadDim>
void launch_for_schedule(const Params& params, Schedule schedule, cudaStream_t stream) {
  switch (schedule) {
    case Schedule::Overlap: return wgmma::run_forward<kMode, Element, kHeadDim, Schedule::Overlap>(params, stream);
    case Schedule::PingPong: return wgmma::run_forward<kMode, Element, kHeadDim, Schedule::PingPong>(params, stream);
    case Schedule::Serial: return wgmma::run_forward<kMode, Element, kHeadDim, Schedule::Serial>(params, stream);
  }
  throw Error(ErrorKind::Internal, fmt::format("sage: schedule {} unknown", static_cast<int>(schedule)));
}

template <Mode kMode, class Element>
void launch_for_dtype(const Params& params, Schedule schedule, cudaStream_t stream) {
  switch (params.head_dim) {
    case 64: return launch_for_schedule<kMode, Element, 64>(params, schedule, stream);
    case 128: return launch_for_schedule<kMode, Element, 128>(params, schedule, stream);
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("head dim {} not supported by sage's wgmma kernel; allowed: 64, 128", params.head_dim));
  }
}

template <Mode kMode>
void launch_for_mode(const Params& params, DType dtype, Schedule schedule, cudaStream_t stream) {
  switch (dtype) {
    case DType::F16: return launch_for_dtype<kMode, __half>(params, schedule, stream);
    case DType::BF16: return launch_for_dtype<kMode, __nv_bfloat16>(params, schedule, stream);
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("dtype {} not supported by sage's wgmma kernel; allowed: fp16, bf16", to_string(dtype)));
  }
}

}  // namespace

std::string wgmma_layout_problem(Mode mode, const Params& params) {
  if (params.seq_q == 0 || params.seq_kv == 0 || params.batch == 0 || params.heads_q == 0)
    return "an empty dimension (no TMA descriptor for it)";
  if (mode == Mode::Sage2) return {};
  const std::string v = flash3::tma_layout_problem(params.v, params.v_batch_stride, params.v_row_stride,
                                                   params.v_head_stride);
  return v.empty() ? v : "V: " + v;
}

void launch_forward_wgmma(Mode mode, const Params& params, DType dtype, Schedule schedule, void* stream) {
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (mode == Mode::Sage) return launch_for_mode<Mode::Sage>(params, dtype, schedule, cuda_stream);
  return launch_for_mode<Mode::Sage2>(params, dtype, schedule, cuda_stream);
}

}  // namespace attnsuite::cuda::sage
