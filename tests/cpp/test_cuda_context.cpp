// The CUDA device context (cuda::make_cuda_context): device query, tracked allocations, poison,
// timers, cache flush, and the inputs the GPU generates itself, bitwise equal to the host's.
//
// Tests that need a GPU skip with "no CUDA device: <reason>" where there is none.
#if ATTNSUITE_HAVE_CUDA

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/device_context.hpp"
#include "bench/generators.hpp"
#include "cuda/cuda_backends.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

TEST(CudaContext, AllocatesTrackedMemoryAndTimes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto context = cuda::make_cuda_context(0);
  const cuda::CudaDeviceInfo info = cuda::query_cuda_device(0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.l2_bytes, 0u);
  std::printf("  device: %s, cc %d.%d, %d SMs, L2 %zu MiB, %zu MiB, driver %s, runtime %d, clock %.0f MHz\n",
              info.name.c_str(), info.cc_major, info.cc_minor, info.sm_count, info.l2_bytes >> 20,
              info.memory_bytes >> 20, info.driver_version.c_str(), info.runtime_version, context->clock_mhz());

  context->reset_peak_memory();
  {
    auto buffer = context->allocate(std::size_t{64} << 20);
    EXPECT_GE(context->peak_memory_since_reset(), std::size_t{64} << 20);
    context->poison(buffer->data(), buffer->bytes());
    std::uint16_t first = 0;
    context->copy_to_host(&first, buffer->data(), 2);
    EXPECT_EQ(first, 0xFFFF);
    auto timer = context->make_timer();
    context->flush_cache();
    timer->start();
    context->flush_cache();
    timer->stop();
    EXPECT_GT(timer->elapsed_ms(), 0.0);
  }
  EXPECT_GT(context->free_bytes(), 0u);
}

// The GPU fills the benchmark's inputs itself; they must be bitwise the host's values, which
// the fp64 reference reads: every device-capable generator × dtype × layout, odd sizes.
TEST(CudaContext, GeneratesInputsBitwiseEqualToTheHost) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto context = cuda::make_cuda_context(0);
  AttentionProblem p;
  p.batch = 2;
  p.heads_q = 3;
  p.heads_kv = 3;
  p.seq_q = 333;
  p.seq_kv = 333;
  p.head_dim = 72;
  const std::array<std::int64_t, 4> shape{p.batch, p.seq_q, p.heads_q, p.head_dim};
  const std::size_t count = static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]);
  for (const auto& generator : bench::generators()) {
    if (!generator.device_kind) continue;
    std::vector<float> q(count), k(count), v(count);
    generator.fill(p, 1234, q, k, v);
    const std::vector<float>* host[3] = {&q, &k, &v};
    for (DType dtype : {DType::F32, DType::F16, DType::BF16})
      for (Layout layout : {Layout::BSHD, Layout::BHSD})
        for (std::uint64_t t = 0; t < 3; ++t) {
          SCOPED_TRACE(generator.name + " " + std::string(to_string(dtype)) + " " + std::string(to_string(layout)) +
                       " tensor " + std::to_string(t));
          auto buffer = context->allocate(count * size_of(dtype));
          context->poison(buffer->data(), buffer->bytes());
          TensorView view;
          view.data = buffer->data();
          view.dtype = dtype;
          view.device = {DeviceType::Cuda, 0};
          view.shape = shape;
          view.strides = TensorView::dense_strides(shape, layout);
          ASSERT_TRUE(context->generate(view, *generator.device_kind,
                                        bench::genmath::tensor_key(*generator.device_kind, 1234, t)));
          std::vector<unsigned char> device_bytes(buffer->bytes());
          context->copy_to_host(device_bytes.data(), buffer->data(), device_bytes.size());
          std::size_t mismatches = 0, dense = 0;
          for (std::int64_t b = 0; b < shape[0]; ++b)
            for (std::int64_t s = 0; s < shape[1]; ++s)
              for (std::int64_t h = 0; h < shape[2]; ++h)
                for (std::int64_t d = 0; d < shape[3]; ++d, ++dense) {
                  unsigned char expected[4];
                  convert_from_float(&(*host[t])[dense], expected, dtype, 1);
                  const auto offset = static_cast<std::size_t>(view.offset(b, s, h, d)) * size_of(dtype);
                  mismatches += std::memcmp(expected, device_bytes.data() + offset, size_of(dtype)) != 0;
                }
          EXPECT_EQ(mismatches, 0u) << "of " << count << " elements";
        }
  }
}

}  // namespace
}  // namespace attnsuite
#endif  // ATTNSUITE_HAVE_CUDA
