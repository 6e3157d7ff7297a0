// flash2 (the FlashAttention-2-class kernel): determinism, every kernel config against the fp64
// reference (cuda_test_support.hpp), and its refusals. The shapes every CUDA backend runs are in
// test_cuda_backends.cpp; its backward in test_cuda_flash2_backward.cpp.
//
// Tests that need a GPU skip with "no CUDA device: <reason>" where there is none; the
// supports() refusals run everywhere.
#if ATTNSUITE_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "cuda_test_support.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

TEST(CudaFlash2, Deterministic) {
  SKIP_WITHOUT_CUDA_DEVICE();
  AttentionProblem p = make_problem(2, 4, 2, 1000, 1000, 128, DType::BF16, Layout::BSHD, true);
  const Inputs in = random_inputs(p, std::random_device{}());
  const DeviceRun first = run_on_device("flash2", p, in);
  const DeviceRun second = run_on_device("flash2", p, in);
  EXPECT_EQ(std::memcmp(first.out_bits.data(), second.out_bits.data(), first.out_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4), 0);
}

// Every kernel configuration `tune --kernels` can choose (configs.hpp), on odd shapes: causal
// with seq_q != seq_kv, GQA, one row, both dtypes.
TEST(CudaFlash2, EveryKernelConfigMatchesTheReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& flash2 = Registry::global().find("flash2");
  for (int head_dim : {64, 128}) {
    const std::vector<std::string> configs =
        flash2.kernel_configs(make_problem(1, 2, 2, 64, 64, head_dim, DType::BF16, Layout::BSHD, false));
    ASSERT_GE(configs.size(), 2u) << "d" << head_dim;
    for (const std::string& config : configs) {
      const PlanOptions options = with_config(config);
      SCOPED_TRACE("config " + config);
      for (const AttentionProblem& p : {make_problem(2, 4, 2, 1000, 333, head_dim, DType::BF16, Layout::BSHD, true),
                                        make_problem(1, 3, 3, 1, 77, head_dim, DType::F16, Layout::BHSD, false),
                                        make_problem(1, 2, 1, 200, 40, head_dim, DType::F16, Layout::BSHD, true)})
        EXPECT_EQ(check_backend("flash2", p, options), config);
    }
  }
  const AttentionProblem p = make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false);
  EXPECT_THROW(flash2.plan(p, with_config("m7")), Error);
}

TEST(CudaFlash2, RefusesWhatItDoesNotSupport) {
  Backend& flash2 = Registry::global().find("flash2");
  AttentionProblem p = make_problem(1, 2, 2, 128, 128, 96, DType::F16, Layout::BSHD, false);
  Support support = flash2.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_EQ(support.reason, "head dim 96 not supported by flash2; allowed: 64, 128, 256");

  p.head_dim = 64;
  p.dtype = DType::F32;
  support = flash2.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("dtype fp32 not supported by flash2"), std::string::npos) << support.reason;

  p.dtype = DType::BF16;
  p.head_dim = 128;
  p.head_dim_v = 64;
  support = flash2.supports(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("head_dim_v 64 != head_dim 128"), std::string::npos) << support.reason;

  p.head_dim_v = 0;
  p.heads_kv = 3;  // not a divisor of heads_q
  EXPECT_FALSE(flash2.supports(p).ok);
}

}  // namespace
}  // namespace attnsuite
#endif  // ATTNSUITE_HAVE_CUDA
