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

template <Mode kMode, class Element>
void launch_for_dtype(const Params& params, bool ping_pong, cudaStream_t stream) {
  switch (params.head_dim) {
    case 64:
      return ping_pong ? wgmma::run_forward<kMode, Element, 64, true>(params, stream)
                       : wgmma::run_forward<kMode, Element, 64, false>(params, stream);
    case 128:
      return ping_pong ? wgmma::run_forward<kMode, Element, 128, true>(params, stream)
                       : wgmma::run_forward<kMode, Element, 128, false>(params, stream);
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("head dim {} not supported by sage's wgmma kernel; allowed: 64, 128", params.head_dim));
  }
}

template <Mode kMode>
void launch_for_mode(const Params& params, DType dtype, bool ping_pong, cudaStream_t stream) {
  switch (dtype) {
    case DType::F16: return launch_for_dtype<kMode, __half>(params, ping_pong, stream);
    case DType::BF16: return launch_for_dtype<kMode, __nv_bfloat16>(params, ping_pong, stream);
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

void launch_forward_wgmma(Mode mode, const Params& params, DType dtype, bool ping_pong, void* stream) {
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (mode == Mode::Sage) return launch_for_mode<Mode::Sage>(params, dtype, ping_pong, cuda_stream);
  return launch_for_mode<Mode::Sage2>(params, dtype, ping_pong, cuda_stream);
}

}  // namespace attnsuite::cuda::sage
