#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/check.hpp"
#include "cuda/common/generate.hpp"

namespace attnsuite::cuda {
namespace {

__global__ void generate_kernel(GenerateTarget target, bench::genmath::Kind kind, std::uint64_t key,
                                std::int64_t total) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    std::int64_t rest = i;
    const std::int64_t d = rest % target.shape[3];
    rest /= target.shape[3];
    const std::int64_t h = rest % target.shape[2];
    rest /= target.shape[2];
    const std::int64_t s = rest % target.shape[1];
    const std::int64_t b = rest / target.shape[1];
    const std::int64_t offset =
        b * target.strides[0] + s * target.strides[1] + h * target.strides[2] + d * target.strides[3];
    const float value = bench::genmath::value(kind, key, static_cast<std::uint64_t>(i));
    switch (target.dtype_code) {
      case 0:
        static_cast<float*>(target.data)[offset] = value;
        break;
      case 1:
        static_cast<__half*>(target.data)[offset] = __float2half_rn(value);
        break;
      default:
        static_cast<__nv_bfloat16*>(target.data)[offset] = __float2bfloat16_rn(value);
        break;
    }
  }
}

}  // namespace

void generate_on_device(const GenerateTarget& target, bench::genmath::Kind kind, std::uint64_t key, void* stream) {
  const std::int64_t total = target.shape[0] * target.shape[1] * target.shape[2] * target.shape[3];
  if (total == 0) return;
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU a few times over; the grid-stride loop covers the rest.
  const std::int64_t blocks = (total + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  generate_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(target, kind, key, total);
  ATTNSUITE_CUDA_CHECK_LAUNCH("generate_kernel");
}

}  // namespace attnsuite::cuda
