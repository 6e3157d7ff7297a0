// ring (issue 10): context parallelism over the visible GPUs through NCCL, in builds that found
// NCCL's header: rings of one, two and every visible GPU against the fp64 reference with the
// kernels' bound (cuda_test_support.hpp), its refusals, and resident inputs.
//
// Tests that need a GPU skip with "no CUDA device: <reason>" where there is none; the ones that
// need more GPUs than are visible say how many they need.
#if ATTNSUITE_HAVE_CUDA
#if ATTNSUITE_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/device_context.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda_test_support.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

int visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

// PlanOptions with ring option `key` = `value`.
PlanOptions ring_option(const std::string& key, const std::string& value) {
  PlanOptions options;
  options.options[key] = value;
  return options;
}

// ring on `world` GPUs (ring_world), against the fp64 reference with the kernels' bound;
// odd lengths (chunks of unequal length), causal and not, GQA, fp16 and bf16.
void check_ring(int world) {
  const PlanOptions options = ring_option("ring_world", std::to_string(world));
  for (bool causal : {false, true}) {
    check_backend("ring", make_problem(1, 8, 8, 1024, 1024, 128, DType::BF16, Layout::BSHD, causal), options);
    check_backend(
        "ring",
        make_problem(2, 8, 2, 1000 + 2 * world + 1, 1000 + 2 * world + 1, 128, DType::BF16, Layout::BSHD, causal),
        options);
    check_backend("ring", make_problem(1, 4, 1, 777, 777, 64, DType::F16, Layout::BSHD, causal), options);
  }
}

TEST(CudaRing, OneGpuRunsARingOfOne) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_ring(1);
}

TEST(CudaRing, TwoGpus) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (visible_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs; " << visible_gpus() << " visible";
  check_ring(2);
}

TEST(CudaRing, EveryVisibleGpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (visible_gpus() < 3) GTEST_SKIP() << "needs 3 or more GPUs; " << visible_gpus() << " visible";
  check_ring(visible_gpus());
}

TEST(CudaRing, RefusesWhatItCannotShard) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& ring = Registry::global().find("ring");
  // The reason plan() refuses with (Error(Unsupported)), or "" when it plans.
  const auto refusal = [&](const AttentionProblem& problem, const PlanOptions& options) -> std::string {
    try {
      (void)ring.plan(problem, options);
      return "";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Unsupported) << error.what();
      return error.what();
    }
  };
  const PlanOptions one = ring_option("ring_world", "1");
  AttentionProblem p = make_problem(1, 8, 8, 1024, 512, 128, DType::BF16, Layout::BSHD, true);
  EXPECT_NE(refusal(p, one).find("needs Nq = Nk"), std::string::npos) << refusal(p, one);
  EXPECT_NE(ring.supports(p).reason.find("needs Nq = Nk"), std::string::npos) << ring.supports(p).reason;
  p = make_problem(1, 8, 8, 1024, 1024, 128, DType::BF16, Layout::BHSD, true);
  EXPECT_NE(refusal(p, one).find("needs bshd"), std::string::npos) << refusal(p, one);
  p.layout = Layout::BSHD;
  EXPECT_EQ(refusal(p, one), "");
  const PlanOptions too_many = ring_option("ring_world", std::to_string(visible_gpus() + 1));
  EXPECT_NE(refusal(p, too_many).find("GPUs visible"), std::string::npos) << refusal(p, too_many);
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"ring_mode", "fast"},
                                   {"ring_world", "0"},
                                   {"ring_world", "x"},
                                   {"ring_inputs", "cached"}}) {
    try {
      (void)ring.plan(p, ring_option(key, value));
      ADD_FAILURE() << key << " = " << value << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Usage) << error.what();
    }
  }
  EXPECT_EQ(ring.option_keys(), (std::vector<std::string>{"ring_world", "ring_mode", "ring_inputs"}));
}

// The harness's repeated forwards of one plan with ring_inputs=resident give the same output as
// the first.
TEST(CudaRing, ResidentInputsRepeatTheFirstOutput) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& ring = Registry::global().find("ring");
  const AttentionProblem p = make_problem(1, 8, 2, 999, 999, 128, DType::BF16, Layout::BSHD, true);
  const std::unique_ptr<KernelPlan> plan = ring.plan(p, ring_option("ring_inputs", "resident"));
  const Inputs in = random_inputs(p, 11);
  auto context = cuda::make_cuda_context(0);
  auto q = context->allocate(in.q.bytes()), k = context->allocate(in.k.bytes()), v = context->allocate(in.v.bytes());
  const std::size_t o_bytes = in.q.bytes();
  auto o = context->allocate(o_bytes);
  context->copy_to_device(q->data(), in.q.bits.data(), in.q.bytes());
  context->copy_to_device(k->data(), in.k.bits.data(), in.k.bytes());
  context->copy_to_device(v->data(), in.v.bits.data(), in.v.bytes());
  const Device device = context->device();
  AttentionArgs args;
  args.q = TensorView{q->data(), p.dtype, device, in.q.shape, in.q.strides};
  args.k = TensorView{k->data(), p.dtype, device, in.k.shape, in.k.strides};
  args.v = TensorView{v->data(), p.dtype, device, in.v.shape, in.v.strides};
  args.o = TensorView{o->data(), p.dtype, device, in.q.shape, in.q.strides};
  std::vector<std::uint16_t> first(o_bytes / 2), again(o_bytes / 2);
  plan->forward(args, context->stream());
  context->synchronize();
  context->copy_to_host(first.data(), o->data(), o_bytes);
  for (int repeat = 0; repeat < 3; ++repeat) {
    context->poison(o->data(), o_bytes);
    plan->forward(args, context->stream());
    context->synchronize();
  }
  context->copy_to_host(again.data(), o->data(), o_bytes);
  EXPECT_EQ(first, again);
}

}  // namespace
}  // namespace attnsuite

#endif  // ATTNSUITE_HAVE_NCCL
#endif  // ATTNSUITE_HAVE_CUDA
