// flash3's backward (sm_90a; its design in docs/kernels/flash3-backward.md): dQ, dK, dV against
// the fp64 reference backward with FlashAttention's rule (backward_test_support.hpp) on fresh random
// inputs and dO, gradients poisoned first; the default kernels and the experimental options. The
// refusals run everywhere; the rest skips without an sm_90 GPU.
#if ATTNSUITE_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "cuda_backward_test_support.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

#if ATTNSUITE_HAVE_FLASH3
// ---------------------------------------------------------------------------------------------
// flash3's backward (sm_90a): the same checks on its head dims 64 and 128, atomic dQ only.

const Backend& flash3_backend() { return Registry::global().find("flash3"); }

#define SKIP_UNLESS_FLASH3_BACKWARD_RUNS()                                                              \
  do {                                                                                                  \
    SKIP_WITHOUT_CUDA_DEVICE();                                                                         \
    const Support flash3_support =                                                                      \
        flash3_backend().supports(make_problem(1, 2, 2, 64, 64, 64, DType::BF16, Layout::BSHD, false)); \
    if (!flash3_support.ok) GTEST_SKIP() << flash3_support.reason;                                      \
  } while (0)

// No opt-in since it passed its GPU tests (H100, 2026-12-06): no backend option, no status; the
// deterministic mode is refused (atomic dQ only), head dims other than 64 and 128 with the reason
// — before any device is asked.
TEST(CudaFlash3Backward, RefusalsNeedNoDevice) {
  const Backend& flash3 = flash3_backend();
  EXPECT_EQ(flash3.backward_status(), "");
  EXPECT_EQ(flash3.option_keys(),
            (std::vector<std::string>{"backward_epilogue", "backward_order", "backward_preprocess", "forward_order"}));
  EXPECT_NO_THROW(flash3.check_options({{"backward_preprocess", "vector"}}));
  EXPECT_NO_THROW(flash3.check_options({{"backward_preprocess", "warp"}}));
  EXPECT_THROW(flash3.check_options({{"backward_preprocess", "lanes"}}), Error);
  const AttentionProblem p = make_problem(1, 2, 2, 128, 128, 64, DType::BF16, Layout::BSHD, true);
  const auto refusal = [&](const AttentionProblem& problem, const PlanOptions& options) {
    try {
      flash3.plan(problem, options);
      ADD_FAILURE() << "a flash3 backward plan was made for " << problem.describe();
      return std::string();
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
      return std::string(error.what());
    }
  };
  EXPECT_NE(refusal(p, backward_options(true, false)).find("flash3's backward has no deterministic mode"),
            std::string::npos);
  const AttentionProblem d256 = make_problem(1, 2, 2, 128, 128, 256, DType::BF16, Layout::BSHD, false);
  EXPECT_EQ(refusal(d256, backward_options(false, false)),
            "flash3: head dim 256 has no flash3 backward; allowed: 64, 128 (at 256 a consumer thread's dK and dV of "
            "its warpgroup's 64 keys alone would be 256 fp32 registers, above the 240 setmaxnreg gives it)");
  EXPECT_FALSE(flash3.supports_backward(d256));
  // backward_epilogue: 4-byte or 16-byte; another value is a usage error naming both.
  EXPECT_EQ(options_usage_error(flash3, {{"backward_epilogue", "8-byte"}}),
            "flash3: backend option backward_epilogue='8-byte' not allowed; allowed: 4-byte, 16-byte");
  EXPECT_NO_THROW(flash3.check_options({{"backward_epilogue", "4-byte"}}));
  EXPECT_NO_THROW(flash3.check_options({{"backward_epilogue", "16-byte"}}));
  // backward_order: grouped-4 (the default) or head-major; grouped-4 not with an explicit epilogue.
  EXPECT_EQ(options_usage_error(flash3, {{"backward_order", "tile-major"}}),
            "flash3: backend option backward_order='tile-major' not allowed; allowed: grouped-4, head-major");
  EXPECT_EQ(options_usage_error(flash3, {{"backward_order", "grouped-4"}, {"backward_epilogue", "4-byte"}}),
            "flash3: backward_order=grouped-4 is built with each head dim's default epilogue; drop backward_epilogue");
  EXPECT_NO_THROW(flash3.check_options({{"backward_order", "grouped-4"}}));
  EXPECT_NO_THROW(flash3.check_options({{"backward_order", "head-major"}, {"backward_epilogue", "4-byte"}}));
}

// Lengths 1, 7, 33 (one partial 64-query tile, a partial 128-key tile), 200 and 1000 (several
// of both), causal and not, both head dims and dtypes, BSHD and BHSD.
TEST(CudaFlash3Backward, SequenceLengthsDtypesHeadDimsAndLayouts) {
  SKIP_UNLESS_FLASH3_BACKWARD_RUNS();
  for (const int head_dim : {64, 128})
    for (const int seq : {1, 7, 33, 200, 1000})
      for (const bool causal : {false, true})
        check_gpu_backward("flash3",
                           make_problem(seq > 200 ? 1 : 2, 2, 2, seq, seq, head_dim, causal ? DType::BF16 : DType::F16,
                                        causal ? Layout::BSHD : Layout::BHSD, causal),
                           false);
}

// The CPU backward's accuracy cases (training_gradient_cases, above) in both dtypes.
TEST(CudaFlash3Backward, TrainingGradientCases) {
  SKIP_UNLESS_FLASH3_BACKWARD_RUNS();
  for (AttentionProblem p : training_gradient_cases())
    for (DType dtype : {DType::F16, DType::BF16}) {
      p.dtype = dtype;
      check_gpu_backward("flash3", p, false);
    }
}

// Small cases for compute-sanitizer (tools/device/run.sh's default filter): partial key and query
// tiles (at d64 a 128-query tile whose second half is past seq_q), causal with seq_q < seq_kv,
// GQA, both head dims and each head dim's other epilogue; odd and even numbers of query tiles.
TEST(CudaFlash3Backward, SmallCasesForSanitizers) {
  SKIP_UNLESS_FLASH3_BACKWARD_RUNS();
  check_gpu_backward("flash3", make_problem(1, 4, 2, 70, 200, 64, DType::F16, Layout::BSHD, true), false);
  check_gpu_backward("flash3", make_problem(1, 2, 1, 100, 130, 128, DType::BF16, Layout::BHSD, false), false);
  check_gpu_backward("flash3", make_problem(1, 2, 2, 150, 150, 64, DType::BF16, Layout::BSHD, false), false);
  check_gpu_backward("flash3", make_problem(1, 4, 2, 70, 200, 64, DType::F16, Layout::BSHD, true), false, 64,
                     {{"backward_epilogue", "16-byte"}});
  check_gpu_backward("flash3", make_problem(1, 2, 1, 100, 130, 128, DType::BF16, Layout::BHSD, false), false, 64,
                     {{"backward_epilogue", "4-byte"}});
  check_gpu_backward("flash3", make_problem(1, 2, 2, 300, 150, 64, DType::BF16, Layout::BSHD, false), false);
  check_gpu_backward("flash3", make_problem(1, 12, 6, 140, 200, 128, DType::F16, Layout::BSHD, true), false);
  check_gpu_backward("flash3", make_problem(1, 12, 6, 140, 200, 128, DType::F16, Layout::BSHD, true), false, 64,
                     {{"backward_order", "head-major"}});
  check_gpu_backward("flash3", make_problem(1, 4, 2, 70, 200, 64, DType::F16, Layout::BSHD, true), false, 64,
                     {{"backward_preprocess", "warp"}});
  check_gpu_backward("flash3", make_problem(1, 2, 1, 100, 130, 128, DType::BF16, Layout::BHSD, false), false, 64,
                     {{"backward_preprocess", "warp"}});
}

// dQ's sums in the tiles' fragment order (one bulk reduction a warp, converted per 64-row tile):
// partial query tiles (rows past seq_q: the workspace's padding; at d64 one consumer's 64 queries
// of a 128-query tile), odd and even tile counts, causal and not, seq_q != seq_kv both ways, GQA, a
// window, dtypes and layouts, the training cases in bf16 — at the head dims given.
void check_tiles_and_odd_cases(const BackendOptions& options, std::vector<int> head_dims = {64, 128}) {
  for (const int head_dim : head_dims) {
    for (const int seq : {1, 33, 65, 129, 200, 1000})
      for (const bool causal : {false, true})
        check_gpu_backward("flash3",
                           make_problem(seq > 200 ? 1 : 2, 2, 2, seq, seq, head_dim, causal ? DType::BF16 : DType::F16,
                                        causal ? Layout::BSHD : Layout::BHSD, causal),
                           false, 64, options);
    check_gpu_backward("flash3", make_problem(1, 2, 2, 1000, 33, head_dim, DType::F16, Layout::BSHD, true), false, 64,
                       options);
    check_gpu_backward("flash3", make_problem(2, 2, 2, 33, 1000, head_dim, DType::F16, Layout::BHSD, false), false, 64,
                       options);
    check_gpu_backward("flash3", make_problem(2, 8, 2, 257, 257, head_dim, DType::F16, Layout::BSHD, false), false, 64,
                       options);
    check_gpu_backward("flash3",
                       windowed(make_problem(1, 2, 2, 300, 300, head_dim, DType::F16, Layout::BSHD, true), 40, 0),
                       false, 64, options);
  }
  for (AttentionProblem p : training_gradient_cases()) {
    if (std::find(head_dims.begin(), head_dims.end(), p.head_dim) == head_dims.end()) continue;
    p.dtype = DType::BF16;
    check_gpu_backward("flash3", p, false, 64, options);
  }
}

TEST(CudaFlash3Backward, DqTilesPartialOddAndEven) {
  SKIP_UNLESS_FLASH3_BACKWARD_RUNS();
  check_tiles_and_odd_cases({});
}

// backward_epilogue, the other store of each head dim's: 16 bytes a lane at d64 (experimental:
// not yet run on a GPU with 128-query tiles), 4 bytes at d128 — the same cases (keys past seq_kv
// in the last tile's quads).
TEST(CudaFlash3Backward, OtherEpiloguesMatchTheReference) {
  SKIP_UNLESS_FLASH3_BACKWARD_RUNS();
  check_tiles_and_odd_cases({{"backward_epilogue", "16-byte"}}, {64});
  check_tiles_and_odd_cases({{"backward_epilogue", "4-byte"}}, {128});
}

// backward_preprocess=warp (one warp a row, 2-byte accesses; the default is vector, 16-byte
// accesses) — the same cases (rows past seq_q in the padded workspace, rows that see no key, both
// layouts and head dims).
TEST(CudaFlash3Backward, WarpPreprocessMatchesTheReference) {
  SKIP_UNLESS_FLASH3_BACKWARD_RUNS();
  check_tiles_and_odd_cases({{"backward_preprocess", "warp"}});
}

// backward_order=head-major (a head's key tiles in a row; the default interleaves 4 heads' key
// tiles): the same cases, and 6 kv heads causal with GQA.
TEST(CudaFlash3Backward, HeadMajorOrderMatchesTheReference) {
  SKIP_UNLESS_FLASH3_BACKWARD_RUNS();
  const BackendOptions head_major = {{"backward_order", "head-major"}};
  check_tiles_and_odd_cases(head_major);
  for (const int head_dim : {64, 128})
    check_gpu_backward("flash3", make_problem(1, 12, 6, 300, 300, head_dim, DType::BF16, Layout::BSHD, true), false, 64,
                       head_major);
}

// seq_q != seq_kv both ways (rows and key tiles that no row sees: dK = dV = 0 there), GQA/MQA
// (dK, dV summed over the group in the CTA), windows.
TEST(CudaFlash3Backward, CausalDifferentLengthsGroupsAndWindows) {
  SKIP_UNLESS_FLASH3_BACKWARD_RUNS();
  check_gpu_backward("flash3", make_problem(2, 2, 2, 33, 1000, 128, DType::BF16, Layout::BSHD, true), false);
  check_gpu_backward("flash3", make_problem(1, 2, 2, 1000, 33, 64, DType::F16, Layout::BSHD, true), false);
  check_gpu_backward("flash3", make_problem(1, 2, 2, 200, 33, 128, DType::BF16, Layout::BHSD, true), false);
  check_gpu_backward("flash3", make_problem(2, 2, 2, 33, 1000, 64, DType::F16, Layout::BHSD, false), false);
  check_gpu_backward("flash3", make_problem(2, 8, 2, 257, 257, 64, DType::F16, Layout::BSHD, false), false);
  check_gpu_backward("flash3", make_problem(2, 8, 2, 257, 257, 128, DType::BF16, Layout::BHSD, true), false);
  check_gpu_backward("flash3", make_problem(1, 4, 1, 33, 1000, 128, DType::F16, Layout::BSHD, true), false);
  // 6 kv heads: a full group of the grid's order (4 heads' key tiles interleaved) and a partial one
  // whose missing heads' CTAs exit.
  check_gpu_backward("flash3", make_problem(1, 12, 6, 300, 300, 64, DType::BF16, Layout::BSHD, true), false);
  check_gpu_backward("flash3", make_problem(1, 12, 6, 300, 300, 128, DType::BF16, Layout::BSHD, true), false);
  check_gpu_backward("flash3", windowed(make_problem(1, 2, 2, 300, 300, 64, DType::F16, Layout::BSHD, true), 40, 0),
                     false);
  check_gpu_backward("flash3", windowed(make_problem(1, 2, 2, 250, 260, 128, DType::BF16, Layout::BSHD, false), 17, 9),
                     false);
  check_gpu_backward("flash3", windowed(make_problem(1, 2, 2, 150, 40, 64, DType::F16, Layout::BSHD, true), 5, 0),
                     false);
}
#endif

}  // namespace
}  // namespace attnsuite

#endif  // ATTNSUITE_HAVE_CUDA
