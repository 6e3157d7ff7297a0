// What every CUDA backend (cuda-vanilla, flash2, and flash3 in builds with -DATTNSUITE_FLASH3=ON)
// shares: the same problems against the fp64 reference with the dtype-aware bound
// (cuda_test_support.hpp), the registration order, and the answers without a device. Each
// kernel's own tests are in test_cuda_<kernel>.cpp, the device context's in test_cuda_context.cpp.
//
// Tests that need a GPU skip with "no CUDA device: <reason>" where there is none; the
// registration and the no-device behaviour run everywhere.
#if ATTNSUITE_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda_test_support.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

class CudaBackendTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaBackendTest, SequenceLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int seq : {1, 7, 33, 1000, 4097})
    for (bool causal : {false, true})
      check_backend(GetParam(), make_problem(seq > 1000 ? 1 : 2, 2, 2, seq, seq, 64, DType::F16, Layout::BSHD, causal));
}

TEST_P(CudaBackendTest, HeadDimsAndDtypes) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : {DType::F16, DType::BF16})
    for (int head_dim : {64, 128, 256})
      for (int seq : {33, 300})
        check_backend(GetParam(), make_problem(2, 2, 2, seq, seq, head_dim, dtype, Layout::BSHD, seq == 300));
}

TEST_P(CudaBackendTest, CausalWithDifferentQueryAndKeyLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // seq_q < seq_kv: every row sees a prefix longer than itself; seq_q > seq_kv: the first
  // seq_q - seq_kv rows see no key at all (O = 0, LSE = -inf).
  check_backend(GetParam(), make_problem(2, 2, 2, 100, 300, 128, DType::BF16, Layout::BSHD, true));
  check_backend(GetParam(), make_problem(2, 2, 2, 300, 100, 128, DType::BF16, Layout::BSHD, true));
  check_backend(GetParam(), make_problem(1, 2, 2, 77, 1000, 64, DType::F16, Layout::BHSD, true));
  check_backend(GetParam(), make_problem(1, 2, 2, 1000, 77, 256, DType::F16, Layout::BSHD, false));
}

TEST_P(CudaBackendTest, GroupedAndMultiQueryHeads) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_backend(GetParam(), make_problem(2, 8, 2, 257, 257, 64, DType::F16, Layout::BSHD, false));
  check_backend(GetParam(), make_problem(2, 8, 2, 257, 257, 128, DType::BF16, Layout::BHSD, true));
  check_backend(GetParam(), make_problem(2, 4, 1, 190, 190, 128, DType::F16, Layout::BSHD, true));
  check_backend(GetParam(), make_problem(1, 4, 1, 65, 130, 256, DType::BF16, Layout::BHSD, false));
}

TEST_P(CudaBackendTest, BhsdLayout) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_backend(GetParam(), make_problem(2, 3, 3, 513, 513, 128, DType::BF16, Layout::BHSD, true));
  check_backend(GetParam(), make_problem(3, 2, 2, 200, 333, 64, DType::F16, Layout::BHSD, false));
}

TEST_P(CudaBackendTest, SlidingWindowWithFullyMaskedRows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // diag = i - 50: rows 0..45 have diag + 4 < 0 and see no key.
  AttentionProblem p = make_problem(2, 2, 2, 200, 150, 64, DType::F16, Layout::BSHD, false);
  p.window_left = 16;
  p.window_right = 4;
  check_backend(GetParam(), p);
  // A two-sided window on a long sequence: tiles on both sides of the band are skipped.
  p = make_problem(1, 2, 2, 1000, 1000, 128, DType::BF16, Layout::BSHD, false);
  p.window_left = 100;
  p.window_right = 37;
  check_backend(GetParam(), p);
  // Causal plus a left window (local attention), GQA.
  p = make_problem(1, 4, 2, 700, 700, 64, DType::BF16, Layout::BHSD, true);
  p.window_left = 129;
  check_backend(GetParam(), p);
}

const std::vector<std::string> kCudaBackends = {
    "cuda-vanilla",
    "flash2",
#if ATTNSUITE_HAVE_FLASH3
    "flash3",
#endif
};

INSTANTIATE_TEST_SUITE_P(Cuda, CudaBackendTest, ::testing::ValuesIn(kCudaBackends),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param == "cuda-vanilla" ? std::string("vanilla") : param_info.param;
                         });

TEST(CudaBackends, RegisteredInOrderWithoutNeedingAGpu) {
  const auto names = Registry::global().names();
  const auto vanilla = std::find(names.begin(), names.end(), "cuda-vanilla");
  const auto flash2 = std::find(names.begin(), names.end(), "flash2");
  ASSERT_NE(vanilla, names.end());
  ASSERT_NE(flash2, names.end());
  EXPECT_LT(vanilla, flash2);
  EXPECT_EQ(Registry::global().find("flash2").display_name(), "flash2 (attnsuite FlashAttention-2-class kernel)");
  const auto flash3 = std::find(names.begin(), names.end(), "flash3");
#if ATTNSUITE_HAVE_FLASH3
  ASSERT_NE(flash3, names.end());
  EXPECT_LT(flash2, flash3);
  const auto flash3_fp8 = std::find(names.begin(), names.end(), "flash3-fp8");
  ASSERT_NE(flash3_fp8, names.end());
  EXPECT_LT(flash3, flash3_fp8);
#else
  EXPECT_EQ(flash3, names.end()) << "flash3 registered in a build without -DATTNSUITE_FLASH3=ON";
  EXPECT_EQ(std::find(names.begin(), names.end(), "flash3-fp8"), names.end());
#endif
}

TEST(CudaBackends, WithoutADeviceSupportsSaysWhyAndContextThrows) {
  if (cuda_device_missing().empty()) GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  const AttentionProblem p = make_problem(1, 2, 2, 128, 128, 64, DType::F16, Layout::BSHD, false);
  for (const std::string& name : kCudaBackends) {
    const Support support = Registry::global().find(name).supports(p);
    EXPECT_FALSE(support.ok);
    EXPECT_EQ(support.reason.rfind("no CUDA device available", 0), 0u) << support.reason;
  }
  try {
    cuda::make_cuda_context(0);
    ADD_FAILURE() << "make_cuda_context succeeded without a device";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Device);
    EXPECT_EQ(std::string(error.what()).rfind("no CUDA device", 0), 0u) << error.what();
  }
  EXPECT_THROW(cuda::query_cuda_device(0), Error);
}

}  // namespace
}  // namespace attnsuite
#endif  // ATTNSUITE_HAVE_CUDA
