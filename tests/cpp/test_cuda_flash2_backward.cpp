// flash2's backward (experimental, opt-in with the backend option experimental_backward=1):
// dQ, dK, dV against the fp64 reference backward with FlashAttention's rule, at most twice the
// error of a naive same-dtype backward plus a floor (backward_test_support.hpp), on fresh random
// inputs and dO, every element compared; gradients poisoned with NaN before every run. Both dQ
// modes: atomic (fp32 sums in the workspace, then converted) and deterministic (the separate dQ
// kernel), the latter also bitwise equal over repeated runs. Rows that see no key give dQ = 0
// exactly; a NaN input reaches the gradients that include it and no other (batch, kv head).
//
// Tests that need a GPU skip with "no CUDA device: <reason>" where there is none; the opt-in,
// the refusals, the workspace size and the host-side tile rules (which query rows see a key
// tile, the element mask) run everywhere.
#if ATTNSUITE_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/device_context.hpp"
#include "backward_test_support.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/backward_rows.hpp"
#include "cuda/common/backward_workspace.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/flash2/flash2.hpp"
#include "cuda/flash2/launch.hpp"
#include "cuda_backward_test_support.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

constexpr std::uint16_t kNanBits = 0x7FFF;  // NaN in fp16 and bf16

const Backend& flash2_backend() { return Registry::global().find("flash2"); }

// ---------------------------------------------------------------------------------------------
// Without a GPU.

// The mask as the kernels fold it (causal into window_right), on small problems of every kind:
// rows_seeing_keys against AttentionProblem's key ranges for every key range, and the element
// mask against them for every (row, key) including rows and keys past the ends.
TEST(CudaFlash2Backward, TileRulesMatchTheProblemsMask) {
  int checked = 0;
  for (int seq_q : {1, 5, 17, 40})
    for (int seq_kv : {1, 6, 17, 33})
      for (bool causal : {false, true})
        for (int window_left : {-1, 0, 3, 50})
          for (int window_right : {-1, 0, 2, 40}) {
            AttentionProblem p = make_problem(1, 1, 1, seq_q, seq_kv, 64, DType::F16, Layout::BSHD, causal);
            p = windowed(p, window_left, window_right);
            const cuda::flash2::Params params = cuda::flash2::make_params(p, AttentionArgs{});
            SCOPED_TRACE(p.describe() + " window " + std::to_string(window_left) + "," + std::to_string(window_right));
            const auto visible = [&](std::int64_t i, std::int64_t j) {
              return i < seq_q && j < seq_kv && p.key_begin(i) <= j && j < p.key_end(i);
            };
            for (int key_begin = 0; key_begin < seq_kv; ++key_begin)
              for (int key_end = key_begin + 1; key_end <= seq_kv; ++key_end) {
                int first = seq_q, last = 0;  // brute force: rows that see one of the keys
                for (int i = 0; i < seq_q; ++i)
                  for (int j = key_begin; j < key_end; ++j)
                    if (visible(i, j)) {
                      first = std::min(first, i);
                      last = std::max(last, i + 1);
                    }
                const cuda::RowRange rows = cuda::rows_seeing_keys(params.seq_q, params.seq_kv, params.window_left,
                                                                   params.window_right, key_begin, key_end);
                if (first < last) {
                  ASSERT_EQ(rows.begin, first) << "keys [" << key_begin << ", " << key_end << ")";
                  ASSERT_EQ(rows.end, last) << "keys [" << key_begin << ", " << key_end << ")";
                } else {
                  ASSERT_GE(rows.begin, rows.end) << "keys [" << key_begin << ", " << key_end << ") seen by none";
                }
              }
            const cuda::MaskBounds mask =
                cuda::mask_bounds(params.seq_q, params.seq_kv, params.window_left, params.window_right);
            for (int i = 0; i < seq_q + 3; ++i)
              for (int j = 0; j < seq_kv + 3; ++j) ASSERT_EQ(mask.hidden(i, j), !visible(i, j)) << i << ", " << j;
            ++checked;
          }
  EXPECT_EQ(checked, 4 * 4 * 2 * 4 * 4);
}

// Not yet run on a GPU: plans refuse the backward unless opted in, with the reason, everywhere
// (the opt-in is decided before the device is asked about).
// Both kernels' backward refuses a missing workspace with its size, before any device is asked.
TEST(CudaBackward, MissingWorkspaceIsOneClearError) {
  BackwardArgs args;
  try {
    cuda::require_backward_workspace("flash3", args, 4096);
    ADD_FAILURE() << "a null workspace accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Usage);
    EXPECT_EQ(std::string(error.what()),
              "flash3: the backward needs its workspace (4096 bytes, the plan's backward_workspace_bytes()); "
              "BackwardArgs::workspace is null");
  }
  int byte = 0;
  args.workspace = &byte;
  EXPECT_NO_THROW(cuda::require_backward_workspace("flash3", args, 4096));
}

TEST(CudaFlash2Backward, RefusedUnlessOptedIn) {
  const Backend& flash2 = flash2_backend();
  EXPECT_EQ(flash2.backward_status(),
            "experimental: opt-in while slower than FlashAttention-2's; backward_split=tiles not yet run on a GPU");
  const std::vector<std::string> keys = flash2.option_keys();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "experimental_backward"), keys.end());
  const AttentionProblem p = make_problem(1, 2, 2, 128, 128, 64, DType::F16, Layout::BSHD, true);
  for (const char* value : {"", "0"}) {
    PlanOptions options = backward_options(false, false);
    if (*value != '\0') options.options["experimental_backward"] = value;
    try {
      flash2.plan(p, options);
      ADD_FAILURE() << "a backward plan without the opt-in (value '" << value << "')";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Unsupported);
      EXPECT_NE(std::string(error.what())
                    .find("flash2's backward is experimental: correct on the GPU, slower than FlashAttention-2's "
                          "backward; opt in with "
                          "the backend option experimental_backward=1"),
                std::string::npos)
          << error.what();
    }
  }
  const std::string opt_in_error = options_usage_error(flash2, {{"experimental_backward", "yes"}});
  EXPECT_NE(opt_in_error.find("experimental_backward='yes' not allowed; allowed: 0, 1"), std::string::npos)
      << opt_in_error;
  EXPECT_NO_THROW(flash2.check_options({{"experimental_backward", "1"}}));
  // backward_key_tile: 64 (the default) or 128, nothing else.
  EXPECT_NE(std::find(keys.begin(), keys.end(), "backward_key_tile"), keys.end());
  for (const char* tile : {"64", "128"}) EXPECT_NO_THROW(flash2.check_options({{"backward_key_tile", tile}}));
  for (const char* tile : {"32", "256", "", "x"})
    EXPECT_EQ(options_usage_error(flash2, {{"backward_key_tile", tile}}),
              std::string("flash2: backend option backward_key_tile='") + tile + "' not allowed; allowed: 64, 128");
  // backward_split: keys (the default) or tiles, nothing else; tiles has 128-key tiles only.
  EXPECT_NE(std::find(keys.begin(), keys.end(), "backward_split"), keys.end());
  for (const char* split : {"keys", "tiles"}) EXPECT_NO_THROW(flash2.check_options({{"backward_split", split}}));
  EXPECT_NO_THROW(flash2.check_options({{"backward_split", "tiles"}, {"backward_key_tile", "128"}}));
  EXPECT_EQ(options_usage_error(flash2, {{"backward_split", "warps"}}),
            "flash2: backend option backward_split='warps' not allowed; allowed: keys, tiles");
  EXPECT_EQ(options_usage_error(flash2, {{"backward_split", "tiles"}, {"backward_key_tile", "64"}}),
            "flash2: backend option backward_key_tile='64' not allowed with backward_split=tiles (128-key tiles); "
            "allowed: 128");
  // backward_preprocess: vector (the default) or warp, nothing else.
  EXPECT_NE(std::find(keys.begin(), keys.end(), "backward_preprocess"), keys.end());
  for (const char* kind : {"vector", "warp"}) EXPECT_NO_THROW(flash2.check_options({{"backward_preprocess", kind}}));
  EXPECT_EQ(options_usage_error(flash2, {{"backward_preprocess", "lanes"}}),
            "flash2: backend option backward_preprocess='lanes' not allowed; allowed: vector, warp");
}

// Head dim 256 has no backward (registers), and says so without a device.
TEST(CudaFlash2Backward, HeadDim256IsRefusedWithTheReason) {
  const AttentionProblem p = make_problem(1, 2, 2, 128, 128, 256, DType::BF16, Layout::BSHD, false);
  const Support support = flash2_backend().supports_backward(p);
  EXPECT_FALSE(support.ok);
  EXPECT_NE(support.reason.find("head dim 256 has no flash2 backward; allowed: 64, 128"), std::string::npos)
      << support.reason;
  EXPECT_NE(support.reason.find("above the 255"), std::string::npos) << support.reason;
}

// The workspace: LSE·log2 e and D per padded row, plus the fp32 dQ sums unless deterministic.
TEST(CudaFlash2Backward, WorkspaceHoldsTheRowsAndTheDqSums) {
  const AttentionProblem p = make_problem(2, 6, 2, 100, 300, 128, DType::F16, Layout::BSHD, true);
  const std::size_t rows = 2 * 6 * 128;  // seq_q 100 padded to 128
  const std::size_t atomic = cuda::backward_workspace_bytes(p, false);
  const std::size_t deterministic = cuda::backward_workspace_bytes(p, true);
  EXPECT_GE(deterministic, 2 * rows * sizeof(float));
  EXPECT_LT(deterministic, 2 * rows * sizeof(float) + 2 * 256);
  EXPECT_GE(atomic, deterministic + rows * 128 * sizeof(float));
  EXPECT_LT(atomic, deterministic + rows * 128 * sizeof(float) + 256);
}

// ---------------------------------------------------------------------------------------------
// On the GPU.

void check_flash2_backward(const AttentionProblem& p, bool deterministic, int key_tile = 64) {
  check_gpu_backward("flash2", p, deterministic, key_tile);
}

void check_both_modes(const AttentionProblem& p) {
  check_flash2_backward(p, false);
  check_flash2_backward(p, true);
}

TEST(CudaFlash2Backward, SequenceLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int seq : {1, 7, 33, 1000, 4097})
    for (bool causal : {false, true})
      check_both_modes(make_problem(seq >= 1000 ? 1 : 2, seq > 1000 ? 1 : 2, seq > 1000 ? 1 : 2, seq, seq, 64,
                                    DType::F16, Layout::BSHD, causal));
}

TEST(CudaFlash2Backward, DtypesHeadDimsAndLayouts) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : {DType::F16, DType::BF16})
    for (int head_dim : {64, 128})
      for (Layout layout : {Layout::BSHD, Layout::BHSD})
        check_both_modes(make_problem(2, 3, 3, 77, 77, head_dim, dtype, layout, head_dim == 128));
  check_both_modes(make_problem(1, 2, 2, 4097, 4097, 128, DType::BF16, Layout::BHSD, true));
}

TEST(CudaFlash2Backward, CausalWithDifferentQueryAndKeyLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // seq_q < seq_kv: row i sees keys 0 .. i + seq_kv - seq_q (decode and chunked prefill).
  check_both_modes(make_problem(2, 2, 2, 33, 1000, 128, DType::BF16, Layout::BSHD, true));
  check_both_modes(make_problem(1, 4, 4, 1, 7, 64, DType::F16, Layout::BHSD, true));
  check_both_modes(make_problem(1, 2, 2, 7, 33, 64, DType::F16, Layout::BSHD, true));
  check_both_modes(make_problem(2, 2, 2, 1, 300, 128, DType::F16, Layout::BSHD, true));
  // seq_q > seq_kv: the first seq_q - seq_kv rows see no key (dQ = 0 there).
  check_both_modes(make_problem(1, 2, 2, 1000, 33, 64, DType::F16, Layout::BSHD, true));
  check_both_modes(make_problem(1, 2, 2, 200, 33, 128, DType::BF16, Layout::BHSD, true));
  // Not causal, different lengths.
  check_both_modes(make_problem(2, 2, 2, 33, 1000, 64, DType::F16, Layout::BHSD, false));
  check_both_modes(make_problem(1, 2, 2, 1000, 33, 128, DType::BF16, Layout::BSHD, false));
}

TEST(CudaFlash2Backward, GroupedAndMultiQueryHeads) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // dK and dV summed over the query heads of a group.
  check_both_modes(make_problem(2, 8, 2, 257, 257, 64, DType::F16, Layout::BSHD, false));
  check_both_modes(make_problem(2, 8, 2, 257, 257, 128, DType::BF16, Layout::BHSD, true));
  check_both_modes(make_problem(1, 4, 1, 33, 1000, 128, DType::F16, Layout::BSHD, true));
  check_both_modes(make_problem(1, 6, 1, 7, 7, 64, DType::BF16, Layout::BHSD, false));
  check_both_modes(make_problem(1, 8, 2, 65, 130, 64, DType::F16, Layout::BSHD, true));
  check_both_modes(make_problem(2, 4, 1, 50, 97, 64, DType::BF16, Layout::BSHD, false));
}

TEST(CudaFlash2Backward, SlidingWindows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const auto p = [](int seq_q, int seq_kv, bool causal, int left, int right, DType dtype, Layout layout, int heads_q,
                    int heads_kv, int head_dim) {
    return windowed(make_problem(1, heads_q, heads_kv, seq_q, seq_kv, head_dim, dtype, layout, causal), left, right);
  };
  check_both_modes(p(300, 300, true, 40, 0, DType::F16, Layout::BSHD, 2, 2, 64));    // local
  check_both_modes(p(250, 260, false, 17, 9, DType::BF16, Layout::BSHD, 2, 2, 64));  // both sides
  check_both_modes(p(150, 40, true, 5, 0, DType::F16, Layout::BSHD, 2, 2, 64));      // rows that see no key
  check_both_modes(p(120, 50, false, -1, 3, DType::BF16, Layout::BHSD, 2, 2, 128));  // right only
  check_both_modes(p(300, 300, true, 33, -1, DType::BF16, Layout::BHSD, 4, 2, 64));  // GQA
  check_both_modes(p(200, 150, false, 16, 4, DType::F16, Layout::BSHD, 2, 2, 128));
}

// Key tiles cut by the end of the keys (1, 7, 130, 333 keys), causal both ways (tiles and rows
// that see no key), GQA/MQA, windows, both head dims, dtypes and layouts: the cases of a
// configuration other than the default's.
std::vector<AttentionProblem> configuration_cases() {
  return {
      make_problem(2, 2, 2, 1, 1, 64, DType::F16, Layout::BSHD, false),
      make_problem(2, 2, 2, 7, 7, 128, DType::BF16, Layout::BHSD, true),
      make_problem(1, 8, 2, 65, 130, 64, DType::F16, Layout::BSHD, true),
      make_problem(1, 4, 1, 333, 333, 128, DType::BF16, Layout::BSHD, true),
      make_problem(1, 2, 2, 1000, 333, 64, DType::BF16, Layout::BHSD, true),
      make_problem(1, 2, 2, 33, 1000, 128, DType::F16, Layout::BSHD, false),
      windowed(make_problem(1, 2, 2, 300, 300, 64, DType::BF16, Layout::BSHD, true), 40, 0),
      windowed(make_problem(1, 2, 2, 200, 150, 128, DType::F16, Layout::BSHD, false), 16, 4),
  };
}

// backward_key_tile=128 (8 warps, 128 keys per CTA), both dQ modes.
TEST(CudaFlash2Backward, KeyTile128MatchesTheReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const AttentionProblem& p : configuration_cases()) {
    check_flash2_backward(p, false, 128);
    check_flash2_backward(p, true, 128);
  }
}

// backward_split=tiles (FlashAttention-2's split among 8 warps, P and dS through shared memory),
// both dQ modes; the sanitizer cases and the deterministic mode's repeatability too.
TEST(CudaFlash2Backward, TiledSplitMatchesTheReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<AttentionProblem> cases = configuration_cases();
  cases.push_back(make_problem(1, 2, 2, 4097, 4097, 128, DType::BF16, Layout::BHSD, true));
  cases.push_back(make_problem(2, 8, 2, 257, 257, 64, DType::F16, Layout::BSHD, false));
  for (const AttentionProblem& p : cases) {
    check_gpu_backward("flash2", p, false, 128, {{"backward_split", "tiles"}});
    check_gpu_backward("flash2", p, true, 128, {{"backward_split", "tiles"}});
  }
}

TEST(CudaFlash2Backward, TiledSplitSmallCasesForSanitizers) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (bool deterministic : {false, true}) {
    check_gpu_backward("flash2", make_problem(1, 4, 2, 70, 130, 64, DType::F16, Layout::BSHD, true), deterministic, 128,
                       {{"backward_split", "tiles"}});
    check_gpu_backward("flash2", windowed(make_problem(1, 2, 2, 100, 90, 128, DType::BF16, Layout::BHSD, false), 20, 5),
                       deterministic, 128, {{"backward_split", "tiles"}});
  }
}

// backward_preprocess=warp (one warp a row; the default is the 16-byte vector preprocess): the
// configuration cases, both dQ modes (the deterministic one has no dQ sums to zero).
TEST(CudaFlash2Backward, WarpPreprocessMatchesTheReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const AttentionProblem& p : configuration_cases()) {
    check_gpu_backward("flash2", p, false, 64, {{"backward_preprocess", "warp"}});
    check_gpu_backward("flash2", p, true, 64, {{"backward_preprocess", "warp"}});
  }
}

// Small cases for compute-sanitizer (tools/device/run.sh's default filter): partial key and
// query tiles, causal with seq_q < seq_kv, GQA, a window; both dQ modes.
TEST(CudaFlash2Backward, SmallCasesForSanitizers) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_both_modes(make_problem(1, 4, 2, 70, 130, 64, DType::F16, Layout::BSHD, true));
  check_both_modes(windowed(make_problem(1, 2, 2, 100, 90, 128, DType::BF16, Layout::BHSD, false), 20, 5));
}

TEST(CudaFlash2Backward, TrainingGradientCases) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (AttentionProblem p : training_gradient_cases())
    for (DType dtype : {DType::F16, DType::BF16}) {
      p.dtype = dtype;
      check_flash2_backward(p, false);
    }
}

// The deterministic mode, run three times from one forward: bitwise equal gradients.
TEST(CudaFlash2Backward, DeterministicRepeatsBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const AttentionProblem& p : {make_problem(2, 8, 2, 300, 300, 64, DType::BF16, Layout::BSHD, true),
                                    make_problem(1, 4, 1, 1000, 1000, 128, DType::F16, Layout::BHSD, false)})
    for (const char* split : {"keys", "tiles"}) {
      SCOPED_TRACE(std::string("backward_split=") + split);
      const std::unique_ptr<KernelPlan> plan =
          flash2_backend().plan(p, backward_options(true, true, 64, {{"backward_split", split}}));
      auto context = cuda::make_cuda_context(0);
      expect_backward_repeats_bitwise(context.get(), *plan, p);
    }
}

// Without its workspace the backward refuses to run (it never allocates one itself).
TEST(CudaFlash2Backward, NeedsItsWorkspace) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttentionProblem p = make_problem(1, 2, 2, 64, 64, 64, DType::F16, Layout::BSHD, false);
  const std::unique_ptr<KernelPlan> plan = flash2_backend().plan(p, backward_options(false));
  ASSERT_GT(plan->backward_workspace_bytes(), 0u);
  auto context = cuda::make_cuda_context(0);
  const Inputs in = random_inputs(p, 1);
  const HostTensor out({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  std::vector<std::unique_ptr<bench::DeviceAllocation>> buffers;
  const auto device_view = [&](const HostTensor& like) {
    buffers.push_back(context->allocate(like.bytes()));
    return TensorView{buffers.back()->data(), p.dtype, context->device(), like.shape, like.strides};
  };
  BackwardArgs args;
  args.q = device_view(in.q);
  args.k = device_view(in.k);
  args.v = device_view(in.v);
  args.o = device_view(out);
  args.d_o = device_view(out);
  args.dq = device_view(in.q);
  args.dk = device_view(in.k);
  args.dv = device_view(in.v);
  buffers.push_back(context->allocate(sizeof(float) * p.batch * p.heads_q * p.seq_q));
  args.lse = LseView{static_cast<float*>(buffers.back()->data()), context->device()};
  try {
    plan->backward(args, context->stream());
    ADD_FAILURE() << "a backward without its workspace ran";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(error.what()).find("needs its workspace"), std::string::npos) << error.what();
  }
}

// NaN in one input element: the gradients that include it are NaN, every other (batch, kv head)
// slice stays finite. Without a mask the NaN's slice is exact too: NaN in Q[b, i, h] reaches
// dQ of row i of head h and dK, dV of every key; NaN in K[b, j, g] reaches every gradient of the
// slice (the rows' LSE and O are NaN).
void check_nan(const AttentionProblem& p, bool in_q, bool deterministic) {
  SCOPED_TRACE(p.describe() + (in_q ? " NaN in Q" : " NaN in K") + (deterministic ? " deterministic" : ""));
  const std::uint64_t seed = std::random_device{}();
  Inputs in = random_inputs(p, seed);
  const std::int64_t b = p.batch - 1, row = 2 * p.seq_q / 3, key = p.seq_kv / 3;
  const std::int64_t h = p.heads_q - 1, g = p.kv_head_of(static_cast<int>(h));
  if (in_q) {
    in.q.bits[static_cast<std::size_t>(in.q.offset(b, row, h, 5))] = kNanBits;
  } else {
    in.k.bits[static_cast<std::size_t>(in.k.offset(b, key, g, 5))] = kNanBits;
  }
  const std::unique_ptr<KernelPlan> plan = flash2_backend().plan(p, backward_options(deterministic));
  auto context = cuda::make_cuda_context(0);
  const BackwardRuns runs = run_backward_on_device(context.get(), *plan, p, in, random_output_gradient(p, seed + 2));
  ASSERT_EQ(runs.bits.size(), 1u);
  const std::array<std::int64_t, 3> seqs = {p.seq_q, p.seq_kv, p.seq_kv};
  const std::array<std::int64_t, 3> heads = {p.heads_q, p.heads_kv, p.heads_kv};
  const std::array<std::int64_t, 3> dims = {p.head_dim, p.head_dim, p.dim_v()};
  const char* names[3] = {"dQ", "dK", "dV"};
  std::int64_t nan_in_slice = 0;
  for (int gradient = 0; gradient < 3; ++gradient) {
    const std::vector<double> values = as_values(runs.bits[0][gradient], p.dtype);
    std::size_t n = 0;
    for (std::int64_t bb = 0; bb < p.batch; ++bb)
      for (std::int64_t s = 0; s < seqs[gradient]; ++s)
        for (std::int64_t hh = 0; hh < heads[gradient]; ++hh)
          for (std::int64_t c = 0; c < dims[gradient]; ++c, ++n) {
            const bool is_nan = std::isnan(values[n]);
            const std::int64_t kv_head = gradient == 0 ? p.kv_head_of(static_cast<int>(hh)) : hh;
            const bool slice = bb == b && kv_head == g;
            if (!slice) {
              ASSERT_FALSE(is_nan) << names[gradient] << "[" << bb << "][" << s << "][" << hh << "][" << c
                                   << "] is NaN outside the NaN's (batch, kv head)";
              continue;
            }
            nan_in_slice += is_nan;
            if (p.has_mask()) continue;
            // Unmasked: exactly the elements whose sums include the NaN.
            bool expected = true;
            if (in_q && gradient == 0) expected = hh == h && s == row;
            ASSERT_EQ(is_nan, expected) << names[gradient] << "[" << bb << "][" << s << "][" << hh << "][" << c << "]";
          }
  }
  EXPECT_GT(nan_in_slice, 0) << "the NaN reaches no gradient";
}

TEST(CudaFlash2Backward, NanReachesItsGradientsAndNoOtherHead) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (bool deterministic : {false, true})
    for (bool in_q : {true, false}) {
      check_nan(make_problem(2, 4, 2, 70, 90, 64, DType::F16, Layout::BSHD, false), in_q, deterministic);
      check_nan(make_problem(2, 4, 2, 70, 90, 128, DType::BF16, Layout::BHSD, true), in_q, deterministic);
    }
}

// NaN in K and V at every third key and in the queries of rows that see no key: those rows
// still get dQ = 0 exactly (0·NaN in a product over hidden keys must not reach them).
TEST(CudaFlash2Backward, RowsThatSeeNoKeyGiveZeroGradients) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int head_dim : {64, 128})
    for (bool deterministic : {false, true}) {
      const AttentionProblem p =
          windowed(make_problem(1, 2, 2, 90, 40, head_dim, DType::F16, Layout::BSHD, true), 7, 0);
      SCOPED_TRACE(p.describe() + (deterministic ? " deterministic" : ""));
      Inputs in = random_inputs(p, 5);
      for (std::int64_t j = 0; j < p.seq_kv; j += 3) {
        in.k.bits[static_cast<std::size_t>(in.k.offset(0, j, 1, j % p.head_dim))] = kNanBits;
        in.v.bits[static_cast<std::size_t>(in.v.offset(0, j, 0, j % p.dim_v()))] = kNanBits;
      }
      std::int64_t empty_rows = 0;
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        if (p.key_begin(i) >= p.key_end(i)) {
          in.q.bits[static_cast<std::size_t>(in.q.offset(0, i, 0, i % p.head_dim))] = kNanBits;
          ++empty_rows;
        }
      ASSERT_GT(empty_rows, 0);
      const std::unique_ptr<KernelPlan> plan = flash2_backend().plan(p, backward_options(deterministic));
      auto context = cuda::make_cuda_context(0);
      const BackwardRuns runs = run_backward_on_device(context.get(), *plan, p, in, random_output_gradient(p, 6));
      ASSERT_EQ(runs.bits.size(), 1u);
      std::int64_t nonzero = 0;
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        if (p.key_begin(i) < p.key_end(i)) continue;
        for (std::int64_t h = 0; h < p.heads_q; ++h)
          for (std::int64_t c = 0; c < p.head_dim; ++c)
            nonzero += runs.bits[0][0][static_cast<std::size_t>((i * p.heads_q + h) * p.head_dim + c)] != 0;
      }
      EXPECT_EQ(nonzero, 0) << "dQ elements not +0 in rows that see no key";
    }
}

}  // namespace
}  // namespace attnsuite

#endif  // ATTNSUITE_HAVE_CUDA
