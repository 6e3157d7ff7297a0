// Dispatch from the run-time (dtype, head dim) to the compiled instantiations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include "attnsuite/error.hpp"
#include "cuda/flash3/launch.hpp"
#include "cuda/flash3/run_forward.cuh"

namespace attnsuite::cuda::flash3 {
namespace {

template <class Element>
void launch_for_dtype(const Params& params, cudaStream_t stream) {
  switch (params.head_dim) {
    case 64: return run_forward<Element, 64>(params, stream);
    case 128: return run_forward<Element, 128>(params, stream);
    case 256: return run_forward<Element, 256>(params, stream);
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("head dim {} not supported by flash3; allowed: 64, 128, 256", params.head_dim));
  }
}

}  // namespace

void launch_forward_m192(const Params& params, DType dtype, void* stream) {
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (params.head_dim != 64) {
    throw Error(ErrorKind::Unsupported,
                fmt::format("flash3: kernel config 'm192' exists for head dim 64 only, not {}", params.head_dim));
  }
  switch (dtype) {
    case DType::F16: return run_forward_m192<__half>(params, cuda_stream);
    case DType::BF16: return run_forward_m192<__nv_bfloat16>(params, cuda_stream);
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("dtype {} not supported by flash3; allowed: fp16, bf16", to_string(dtype)));
  }
}

void launch_forward(const Params& params, DType dtype, void* stream) {
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::F16: return launch_for_dtype<__half>(params, cuda_stream);
    case DType::BF16: return launch_for_dtype<__nv_bfloat16>(params, cuda_stream);
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("dtype {} not supported by flash3; allowed: fp16, bf16", to_string(dtype)));
  }
}

}  // namespace attnsuite::cuda::flash3
