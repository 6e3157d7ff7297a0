// flash3-fp8's entry for e4m3 inputs: the same e4m3 kernel as the bf16-in path (fp8_launch.cu),
// without the quantization pre-pass. The kernel reads its descales from device memory, so the
// three host descales are written there by a one-thread kernel on the stream (a kernel rather
// than a copy from host memory: it is stream-ordered and can be captured in a CUDA graph).
// A file of its own so that the bf16-in path's PTX stays as it is.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/flash3/fp8_launch.hpp"
#include "cuda/flash3/fp8_run_forward.cuh"

namespace attnsuite::cuda::flash3 {
namespace {

__global__ void write_descales_kernel(float* descales, float q, float k, float v) {
  descales[0] = q;
  descales[1] = k;
  descales[2] = v;
}

}  // namespace

void launch_forward_fp8_e4m3(const Params& params, const float (&descales)[3], void* workspace, Fp8Order order,
                             void* stream) {
  if (params.head_dim != 64 && params.head_dim != 128) {
    throw Error(ErrorKind::Unsupported,
                fmt::format("head dim {} not supported by flash3-fp8; allowed: 64, 128", params.head_dim));
  }
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  auto* device_descales = static_cast<float*>(workspace);
  write_descales_kernel<<<1, 1, 0, cuda_stream>>>(device_descales, descales[0], descales[1], descales[2]);
  ATTNSUITE_CUDA_CHECK_LAUNCH("flash3-fp8 write_descales_kernel");
  run_fp8_ordered(params, device_descales, order, cuda_stream);
}

}  // namespace attnsuite::cuda::flash3
