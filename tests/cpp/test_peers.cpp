// The peer backends (cuDNN SDPA through cudnn-frontend; PyTorch's SDPA backends through
// libtorch) against an fp64 CPU reference written here, on fresh random fp16/bf16 inputs, every
// element compared. The bound is dtype-aware: a peer may be off the fp64 result by at most twice
// what a naive implementation in the same dtype is off (inputs in that dtype, fp32 scores and
// softmax, P rounded to the dtype before P·V, output rounded), plus a floor of a few output ulps.
// NaN never passes. Outputs we allocate are poisoned with NaN first; the PyTorch peers allocate
// their own, so each of their checked runs follows a run on other inputs, whose output the
// caching allocator hands out again: rows a kernel failed to write would hold stale values.
//
// The backward (PlanOptions::backward): each peer's dQ, dK, dV against the fp64 reference
// backward (src/cpu/backward.hpp) with FlashAttention's rule, at most twice the error of a naive
// same-dtype backward plus a floor (backward_test_support.hpp, shared with flash2's backward
// tests). Rows that see no key must give dQ = 0 exactly; gradients we allocate
// (cuDNN's) are poisoned, the PyTorch peers' follow a run on other inputs as their outputs do.
//
// The peers are registered into a local Registry here (peers::register_peer_backends), so these
// tests do not depend on the global registration. Tests that need a GPU skip with "no CUDA
// device: <reason>" where there is none; the registration and the refusals that need no GPU run
// everywhere.
#if ATTNSUITE_HAVE_PEERS

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/device_context.hpp"
#include "backward_test_support.hpp"
#include "cpu/backward.hpp"
#include "cuda/cuda_backends.hpp"
#include "gpu_test_support.hpp"
#include "peers/peers.hpp"

namespace attnsuite {
namespace {

using namespace testing_support;

Registry& peer_registry() {
  static Registry registry;
  static const bool registered = (peers::register_peer_backends(registry), true);
  (void)registered;
  return registry;
}

std::vector<std::string> built_peers() {
  std::vector<std::string> names;
#if ATTNSUITE_HAVE_CUDNN_PEER
  names.push_back("cudnn");
#endif
#if ATTNSUITE_HAVE_TORCH_PEERS
  for (const char* name : {"torch-sdpa", "torch-flash", "torch-efficient", "torch-cudnn", "torch-math"})
    names.push_back(name);
#endif
  return names;
}

struct DeviceRun {
  Result result;             // O in (b, h, i, d) order, LSE (empty when the peer gives none)
  std::size_t own_peak = 0;  // RunReport::own_peak_memory_bytes of the run
};

// Copies the inputs to the GPU, plans and runs the peer as the harness does (poisoned O and LSE
// of ours, or the peer's own output), and reads O through its strides.
DeviceRun run_on_device(bench::DeviceContext* context, const Backend& backend, const AttentionProblem& p,
                        const Inputs& in) {
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, {});
  auto q = context->allocate(in.q.bytes()), k = context->allocate(in.k.bytes()), v = context->allocate(in.v.bytes());
  context->copy_to_device(q->data(), in.q.bits.data(), in.q.bytes());
  context->copy_to_device(k->data(), in.k.bits.data(), in.k.bytes());
  context->copy_to_device(v->data(), in.v.bits.data(), in.v.bytes());

  const Device device = context->device();
  auto view = [&](void* data, const HostTensor& t) { return TensorView{data, p.dtype, device, t.shape, t.strides}; };
  AttentionArgs args;
  args.q = view(q->data(), in.q);
  args.k = view(k->data(), in.k);
  args.v = view(v->data(), in.v);

  const HostTensor o_layout({p.batch, p.seq_q, p.heads_q, p.dim_v()}, p.layout);
  const std::size_t lse_bytes = sizeof(float) * p.batch * p.heads_q * p.seq_q;
  std::unique_ptr<bench::DeviceAllocation> o, lse, workspace;
  const bool own_output = plan->produces_own_output();
  // PyTorch's peers return their own output; cuDNN writes ours.
  EXPECT_EQ(own_output, backend.name() != "cudnn") << backend.name();
  if (!own_output) {
    o = context->allocate(o_layout.bytes());
    lse = context->allocate(lse_bytes);
    context->poison(o->data(), o_layout.bytes());
    context->poison(lse->data(), lse_bytes);
    args.o = view(o->data(), o_layout);
    args.lse = LseView{static_cast<float*>(lse->data()), device};
  }
  if (const std::size_t bytes = plan->workspace_bytes(); bytes > 0) {
    workspace = context->allocate(bytes);
    args.workspace = workspace->data();
  }
  context->synchronize();
  const RunReport report = plan->forward(args, context->stream());
  context->synchronize();

  DeviceRun run{empty_result(p), report.own_peak_memory_bytes};
  const TensorView out = own_output ? report.output : args.o;
  EXPECT_FALSE(out.empty()) << "no output";
  EXPECT_EQ(out.dtype, p.dtype);
  EXPECT_EQ(out.shape, o_layout.shape);
  if (out.empty() || out.shape != o_layout.shape) return run;
  std::int64_t span = 1;
  for (int dim = 0; dim < 4; ++dim) span += (out.shape[dim] - 1) * out.strides[dim];
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(span));
  context->copy_to_host(bits.data(), out.data, bits.size() * 2);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i)
        for (std::int64_t d = 0; d < p.dim_v(); ++d)
          run.result.out[out_index(p, b, h, i) + d] = load_as_float(bits.data(), p.dtype, out.offset(b, i, h, d));

  const LseView lse_view = own_output ? report.output_lse : args.lse;
  if (lse_view.empty()) {
    run.result.lse.clear();
  } else {
    std::vector<float> values(run.result.lse.size());
    context->copy_to_host(values.data(), lse_view.data, lse_bytes);
    std::copy(values.begin(), values.end(), run.result.lse.begin());
  }
  return run;
}

// The peers that return a log-sum-exp (torch-sdpa and torch-math return the output only).
bool gives_lse(const std::string& name) { return name != "torch-sdpa" && name != "torch-math"; }

// Refusals that are by design (and so do not fail a test): cuDNN's bottom-right diagonal band
// (causal, sliding windows) needs seq_q <= seq_kv; PyTorch's is_causal is top-left, so
// torch-sdpa and torch-cudnn refuse causal with seq_q != seq_kv; of PyTorch's backends only
// torch-math runs sliding windows. torch-cudnn also goes by PyTorch's own cuDNN gate, which
// varies with the GPU and cuDNN: its refusals skip.
bool refusal_expected(const std::string& name, const AttentionProblem& p) {
  const bool window = p.window_left >= 0 || p.window_right >= 0;
  if (name == "torch-cudnn") return true;
  if (name == "cudnn") return (p.causal || window) && p.seq_q > p.seq_kv;
  if (window) return name != "torch-math";
  if (name == "torch-efficient") return p.causal && p.seq_q > p.seq_kv;
  if (name == "torch-sdpa") return p.causal && p.seq_q != p.seq_kv;
  return false;
}

// Checks one peer on one problem with fresh random inputs. A refusal is reported, and fails the
// test unless refusal_expected().
void check_peer(const std::string& name, const AttentionProblem& p) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(name + " " + p.describe() + " " + std::string(to_string(p.layout)) + " seed " + std::to_string(seed));
  const Backend& backend = peer_registry().find(name);
  const Support support = backend.supports(p);
  if (!support) {
    EXPECT_TRUE(refusal_expected(name, p)) << "refused: " << support.reason;
    std::printf("  %-16s %-58s refused: %s\n", name.c_str(), p.describe().c_str(), support.reason.c_str());
    return;
  }

  const Inputs in = random_inputs(p, seed);
  // One context, so one stream: PyTorch's caching allocator reuses a freed block on its stream.
  auto context = cuda::make_cuda_context(0);
  const bool own_output = name != "cudnn";  // run_on_device checks the plan says so
  if (own_output) run_on_device(context.get(), backend, p, random_inputs(p, seed + 1));
  const DeviceRun run = run_on_device(context.get(), backend, p, in);
  const Result ref = reference_f64(p, in);
  const Result naive = naive_same_dtype(p, in, /*round_scores=*/false);

  const ErrorStats err = compare(run.result.out, ref.out);
  const ErrorStats naive_err = compare(naive.out, ref.out);
  const double ulp = p.dtype == DType::F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  const double floor = 4.0 * ulp * std::max(max_abs(ref.out), 1.0 / 16);
  const double bound = 2.0 * naive_err.max_abs + floor;
  EXPECT_EQ(err.nan_count, 0) << "NaN (poison never overwritten, or computed) in O";
  EXPECT_LE(err.max_abs, bound) << "O max abs err " << err.max_abs << " (mean " << err.mean_abs << ") at flat index "
                                << err.worst_index << "; naive " << to_string(p.dtype) << " max err "
                                << naive_err.max_abs << ", floor " << floor;

  if (own_output) {
    const std::size_t out_bytes =
        static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * p.dim_v() * size_of(p.dtype);
    EXPECT_GE(run.own_peak, out_bytes) << "the caching allocator's peak misses the output itself";
    if (name == "torch-math") {
      const std::size_t scores = static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * p.seq_kv * size_of(p.dtype);
      EXPECT_GE(run.own_peak, scores) << "the math backend's materialized scores are not counted";
    }
  }

  EXPECT_EQ(!run.result.lse.empty(), gives_lse(name)) << "LSE given or missing unexpectedly";
  double lse_max_err = 0.0;
  if (!run.result.lse.empty()) {
    // -inf exactly where the row sees no key; elsewhere within the same kind of bound.
    std::vector<double> got = run.result.lse, want = ref.lse, naive_lse = naive.lse;
    std::int64_t empty_mismatch = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const bool want_empty = std::isinf(want[i]);
      const bool got_empty = std::isinf(got[i]) && got[i] < 0;
      if (want_empty != got_empty) ++empty_mismatch;
      if (want_empty) got[i] = want[i] = naive_lse[i] = 0.0;
    }
    EXPECT_EQ(empty_mismatch, 0) << "rows whose LSE is -inf in one of reference and peer only";
    const ErrorStats lse_err = compare(got, want);
    const ErrorStats naive_lse_err = compare(naive_lse, want);
    const double lse_bound = 2.0 * naive_lse_err.max_abs + 1e-4 * std::max(1.0, max_abs(want));
    EXPECT_EQ(lse_err.nan_count, 0) << "NaN in LSE";
    EXPECT_LE(lse_err.max_abs, lse_bound) << "LSE max abs err " << lse_err.max_abs << " at row " << lse_err.worst_index
                                          << "; naive " << naive_lse_err.max_abs;
    lse_max_err = lse_err.max_abs;
  }
  std::printf("  %-16s %-58s O max err %.3g (naive %.3g, bound %.3g)  LSE max err %.3g\n", name.c_str(),
              p.describe().c_str(), err.max_abs, naive_err.max_abs, bound, lse_max_err);
}

// ---------------------------------------------------------------------------------------------
// The backward.

// The backward refusals that are by design: the forward's, plus cuDNN's backward graph limits
// (no seq_q = seq_kv = 1; head dims above 128 before Hopper) — for torch-cudnn through
// PyTorch's gate, whose answers vary with GPU and cuDNN.
bool backward_refusal_expected(const std::string& name, const AttentionProblem& p) {
  if (name == "torch-cudnn") return true;
  if (name == "cudnn") return (p.seq_q == 1 && p.seq_kv == 1) || p.head_dim > 128 || p.dim_v() > 128;
  return false;
}

// Checks one peer's backward on one problem with fresh random inputs and dO.
void check_peer_backward(const std::string& name, const AttentionProblem& p) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(name + " backward " + p.describe() + " " + std::string(to_string(p.layout)) + " seed " +
               std::to_string(seed));
  const Backend& backend = peer_registry().find(name);
  if (const Support support = backend.supports(p); !support) {
    EXPECT_TRUE(refusal_expected(name, p)) << "refused: " << support.reason;
    std::printf("  %-16s %-58s refused: %s\n", name.c_str(), p.describe().c_str(), support.reason.c_str());
    return;
  }
  if (const Support support = backend.supports_backward(p); !support) {
    EXPECT_TRUE(backward_refusal_expected(name, p)) << "backward refused: " << support.reason;
    std::printf("  %-16s %-58s backward refused: %s\n", name.c_str(), p.describe().c_str(), support.reason.c_str());
    return;
  }
  PlanOptions options;
  options.backward = true;
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, options);
  const bool own_output = plan->produces_own_output();
  EXPECT_EQ(own_output, name != "cudnn") << name;

  const Inputs in = random_inputs(p, seed);
  const HostTensor d_o = random_output_gradient(p, seed + 2);
  auto context = cuda::make_cuda_context(0);
  // PyTorch's gradients are fresh tensors: a run on other inputs first leaves its blocks in the
  // caching allocator for the checked run to reuse.
  if (own_output) run_backward_on_device(context.get(), *plan, p, random_inputs(p, seed + 1), d_o);
  const BackwardRuns runs = run_backward_on_device(context.get(), *plan, p, in, d_o);
  const GradientErrors errors = expect_gradients_match_reference(p, in, d_o, runs);
  if (own_output) {
    const std::size_t gradient_bytes = (in.q.bits.size() + in.k.bits.size() + in.v.bits.size()) * 2;
    EXPECT_GE(runs.own_peak, gradient_bytes) << "the caching allocator's peak misses the gradients themselves";
  }
  std::printf("  %-16s %-58s dQ %.3g dK %.3g dV %.3g max err\n", name.c_str(), p.describe().c_str(), errors.dq,
              errors.dk, errors.dv);
}

TEST(Peers, RegisteredAsBuilt) {
  const std::vector<std::string> expected = built_peers();
  EXPECT_EQ(peer_registry().names(), expected);
  for (const std::string& name : expected) {
    Backend& backend = peer_registry().find(name);
    EXPECT_EQ(backend.name(), name);
    EXPECT_FALSE(backend.display_name().empty()) << name;
    EXPECT_EQ(backend.peer_of(), name == "cudnn" ? "cuDNN" : "PyTorch");
    EXPECT_EQ(backend.device().type, DeviceType::Cuda) << name;
    EXPECT_FALSE(backend.capabilities().empty()) << name;
  }
  if (peer_registry().contains("cudnn")) {
    const std::string display(peer_registry().find("cudnn").display_name());
    EXPECT_EQ(display.rfind("cuDNN SDPA (cuDNN 9.", 0), 0u) << display;
    EXPECT_NE(display.find(" fused flash attention)"), std::string::npos) << display;
  }
  if (peer_registry().contains("torch-flash")) {
    EXPECT_EQ(peer_registry().find("torch-flash").display_name(), "FlashAttention-2 (PyTorch flash backend)");
  }
}

TEST(Peers, WithoutADeviceEveryPeerSaysSo) {
  const std::string missing = cuda_device_missing();
  if (missing.empty()) GTEST_SKIP() << "a CUDA device is present";
  const AttentionProblem p = make_problem(1, 2, 2, 64, 64, 64, DType::F16, Layout::BSHD, false);
  for (const std::string& name : built_peers()) {
    for (const Support& support :
         {peer_registry().find(name).supports(p), peer_registry().find(name).supports_backward(p)}) {
      EXPECT_FALSE(support.ok) << name;
      EXPECT_EQ(support.reason.rfind("no CUDA device available", 0), 0u) << name << ": " << support.reason;
    }
  }
}

// The refusals decided by the problem alone, before any device query: they hold everywhere.
TEST(Peers, RefusalsThatNeedNoDevice) {
  auto reason = [](const std::string& name, const AttentionProblem& p) {
    const Support support = peer_registry().find(name).supports(p);
    EXPECT_FALSE(support.ok) << name << " accepted " << p.describe();
    return support.reason;
  };
  AttentionProblem p = make_problem(1, 2, 2, 64, 64, 64, DType::F32, Layout::BSHD, false);
  AttentionProblem causal_longer_q = make_problem(1, 2, 2, 300, 100, 64, DType::BF16, Layout::BSHD, true);
  AttentionProblem causal_shorter_q = make_problem(1, 2, 2, 100, 300, 64, DType::BF16, Layout::BSHD, true);
  AttentionProblem windowed = make_problem(1, 2, 2, 64, 64, 64, DType::F16, Layout::BSHD, false);
  windowed.window_left = 16;
  AttentionProblem windowed_longer_q = make_problem(1, 2, 2, 300, 100, 64, DType::BF16, Layout::BSHD, false);
  windowed_longer_q.window_left = 16;
  if (peer_registry().contains("cudnn")) {
    EXPECT_EQ(reason("cudnn", p), "cudnn SDPA needs fp16, bf16 or e4m3");
    AttentionProblem odd = make_problem(1, 2, 2, 64, 64, 20, DType::F16, Layout::BSHD, false);
    EXPECT_NE(reason("cudnn", odd).find("head dim 20 not supported by cudnn SDPA"), std::string::npos);
    odd.head_dim = 320;
    EXPECT_NE(reason("cudnn", odd).find("head dim 320"), std::string::npos);
    EXPECT_NE(reason("cudnn", causal_longer_q).find("seq_q 300 > seq_kv 100"), std::string::npos);
    EXPECT_NE(reason("cudnn", windowed_longer_q).find("sliding window with seq_q 300 > seq_kv 100"), std::string::npos);
    AttentionProblem windowed_e4m3 = windowed;
    windowed_e4m3.dtype = DType::E4M3;
    EXPECT_NE(reason("cudnn", windowed_e4m3).find("sliding window with e4m3"), std::string::npos);
  }
  if (peer_registry().contains("torch-flash")) {
    EXPECT_EQ(reason("torch-flash", p), "torch-flash needs fp16 or bf16");
    EXPECT_EQ(reason("torch-cudnn", p), "torch-cudnn needs fp16 or bf16");
    AttentionProblem uneven = make_problem(1, 2, 2, 64, 64, 128, DType::F16, Layout::BSHD, false);
    uneven.head_dim_v = 64;
    EXPECT_NE(reason("torch-flash", uneven).find("head_dim_v 64 != head_dim 128"), std::string::npos);
    for (const char* name : {"torch-sdpa", "torch-cudnn"}) {
      EXPECT_NE(reason(name, causal_longer_q).find("top-left"), std::string::npos) << name;
      EXPECT_NE(reason(name, causal_shorter_q).find("top-left"), std::string::npos) << name;
    }
    for (const char* name : {"torch-sdpa", "torch-flash", "torch-efficient", "torch-cudnn"})
      EXPECT_NE(reason(name, windowed).find("sliding window"), std::string::npos) << name;
  }
}

class PeerBackendTest : public ::testing::TestWithParam<std::string> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PeerBackendTest);

TEST_P(PeerBackendTest, SequenceLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int seq : {1, 7, 33, 1000})
    for (bool causal : {false, true})
      check_peer(GetParam(), make_problem(seq >= 1000 ? 1 : 2, 2, 2, seq, seq, 64, DType::F16, Layout::BSHD, causal));
}

TEST_P(PeerBackendTest, DtypesHeadDimsAndLayouts) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (DType dtype : {DType::F16, DType::BF16})
    for (int head_dim : {64, 128, 256})
      for (Layout layout : {Layout::BSHD, Layout::BHSD})
        check_peer(GetParam(), make_problem(2, 3, 3, 77, 77, head_dim, dtype, layout, head_dim == 128));
}

TEST_P(PeerBackendTest, CausalWithDifferentQueryAndKeyLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // seq_q < seq_kv: row i sees keys 0 .. i + seq_kv - seq_q (decode and chunked prefill).
  check_peer(GetParam(), make_problem(2, 2, 2, 33, 1000, 128, DType::BF16, Layout::BSHD, true));
  check_peer(GetParam(), make_problem(1, 4, 4, 1, 7, 64, DType::F16, Layout::BHSD, true));
  check_peer(GetParam(), make_problem(1, 2, 2, 7, 33, 64, DType::F16, Layout::BSHD, true));
  // seq_q > seq_kv: the first seq_q - seq_kv rows see no key (O = 0, LSE = -inf).
  check_peer(GetParam(), make_problem(1, 2, 2, 1000, 33, 64, DType::F16, Layout::BSHD, true));
  // Not causal, different lengths.
  check_peer(GetParam(), make_problem(2, 2, 2, 33, 1000, 64, DType::F16, Layout::BHSD, false));
}

TEST_P(PeerBackendTest, GroupedAndMultiQueryHeads) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_peer(GetParam(), make_problem(2, 8, 2, 257, 257, 64, DType::F16, Layout::BSHD, false));
  check_peer(GetParam(), make_problem(2, 8, 2, 257, 257, 128, DType::BF16, Layout::BHSD, true));
  check_peer(GetParam(), make_problem(1, 4, 1, 33, 1000, 128, DType::F16, Layout::BSHD, true));
  check_peer(GetParam(), make_problem(1, 6, 1, 7, 7, 64, DType::BF16, Layout::BHSD, false));
}

TEST_P(PeerBackendTest, SlidingWindows) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // torch-math (a materialized mask) and cudnn (its diagonal band, seq_q <= seq_kv) run windows;
  // the others refuse by design.
  AttentionProblem p = make_problem(1, 2, 2, 200, 150, 64, DType::F16, Layout::BSHD, false);
  p.window_left = 16;
  p.window_right = 4;
  check_peer(GetParam(), p);
  p = make_problem(1, 4, 2, 300, 300, 64, DType::BF16, Layout::BHSD, true);
  p.window_left = 33;
  check_peer(GetParam(), p);
  // Bottom-right bands with seq_q < seq_kv: a left window alone, causal with a left window, and
  // both sides of a non-causal window.
  p = make_problem(1, 2, 2, 150, 400, 128, DType::F16, Layout::BSHD, false);
  p.window_left = 40;
  check_peer(GetParam(), p);
  p.causal = true;
  check_peer(GetParam(), p);
  p = make_problem(2, 4, 2, 100, 260, 64, DType::BF16, Layout::BSHD, false);
  p.window_left = 7;
  p.window_right = 19;
  check_peer(GetParam(), p);
}

TEST_P(PeerBackendTest, BackwardSequenceLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int seq : {1, 7, 33, 1000})
    for (bool causal : {false, true})
      check_peer_backward(GetParam(),
                          make_problem(seq >= 1000 ? 1 : 2, 2, 2, seq, seq, 64, DType::F16, Layout::BSHD, causal));
}

TEST_P(PeerBackendTest, BackwardDtypesHeadDimsAndLayouts) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_peer_backward(GetParam(), make_problem(2, 3, 3, 77, 77, 128, DType::BF16, Layout::BHSD, true));
  check_peer_backward(GetParam(), make_problem(1, 2, 2, 65, 65, 256, DType::F16, Layout::BSHD, false));
}

TEST_P(PeerBackendTest, BackwardCausalWithDifferentQueryAndKeyLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  check_peer_backward(GetParam(), make_problem(2, 2, 2, 33, 1000, 128, DType::BF16, Layout::BSHD, true));
  check_peer_backward(GetParam(), make_problem(1, 4, 4, 1, 7, 64, DType::F16, Layout::BHSD, true));
  check_peer_backward(GetParam(), make_problem(1, 2, 2, 7, 33, 64, DType::F16, Layout::BSHD, true));
  // seq_q > seq_kv: the first seq_q - seq_kv rows see no key (dQ = 0 there).
  check_peer_backward(GetParam(), make_problem(1, 2, 2, 1000, 33, 64, DType::F16, Layout::BSHD, true));
  check_peer_backward(GetParam(), make_problem(2, 2, 2, 33, 1000, 64, DType::F16, Layout::BHSD, false));
}

TEST_P(PeerBackendTest, BackwardGroupedAndMultiQueryHeads) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // dK and dV summed over the query heads of a group.
  check_peer_backward(GetParam(), make_problem(2, 8, 2, 257, 257, 64, DType::F16, Layout::BSHD, false));
  check_peer_backward(GetParam(), make_problem(1, 4, 1, 33, 1000, 128, DType::F16, Layout::BSHD, true));
  check_peer_backward(GetParam(), make_problem(1, 6, 1, 7, 7, 64, DType::BF16, Layout::BHSD, false));
}

TEST_P(PeerBackendTest, BackwardSlidingWindow) {
  SKIP_WITHOUT_CUDA_DEVICE();
  AttentionProblem p = make_problem(1, 4, 2, 300, 300, 64, DType::BF16, Layout::BHSD, true);
  p.window_left = 33;
  check_peer_backward(GetParam(), p);  // torch-math and cudnn; the others refuse its forward
  p = make_problem(1, 2, 2, 100, 260, 128, DType::F16, Layout::BSHD, false);
  p.window_left = 7;
  p.window_right = 19;
  check_peer_backward(GetParam(), p);
}

// A deterministic plan's backward, run twice from one forward: bitwise equal gradients. Peers
// without a deterministic backward refuse the plan (torch-cudnn: PyTorch's gate).
TEST_P(PeerBackendTest, DeterministicBackwardRepeatsBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string name = GetParam();
  const Backend& backend = peer_registry().find(name);
  const AttentionProblem p = make_problem(2, 8, 2, 300, 300, 64, DType::BF16, Layout::BSHD, true);
  if (!backend.supports(p) || !backend.supports_backward(p)) {
    EXPECT_TRUE(refusal_expected(name, p) || backward_refusal_expected(name, p)) << name;
    GTEST_SKIP() << name << " has no backward for " << p.describe();
  }
  PlanOptions options;
  options.backward = true;
  options.deterministic = true;
  std::unique_ptr<KernelPlan> plan;
  try {
    plan = backend.plan(p, options);
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Unsupported) << error.what();
    EXPECT_TRUE(name == "torch-cudnn" || name == "cudnn") << "deterministic plan refused: " << error.what();
    std::printf("  %-16s deterministic refused: %s\n", name.c_str(), error.what());
    return;
  }
  SCOPED_TRACE(name);
  auto context = cuda::make_cuda_context(0);
  expect_backward_repeats_bitwise(context.get(), *plan, p);
}

// The PyTorch peers differentiate the graph their forward recorded: a backward without that
// forward, or with other inputs, is refused with a reason.
TEST_P(PeerBackendTest, TorchBackwardTakesItsForwardsTensors) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string name = GetParam();
  if (name.rfind("torch-", 0) != 0) GTEST_SKIP() << "not a PyTorch peer";
  const AttentionProblem p = make_problem(1, 2, 2, 64, 64, 64, DType::F16, Layout::BSHD, false);
  const Backend& backend = peer_registry().find(name);
  if (!backend.supports(p) || !backend.supports_backward(p)) GTEST_SKIP() << name << " refuses " << p.describe();
  PlanOptions options;
  options.backward = true;
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, options);
  try {
    plan->backward(BackwardArgs{}, nullptr);
    ADD_FAILURE() << "backward before any forward ran";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(error.what()).find("before forward"), std::string::npos) << error.what();
  }
  const std::unique_ptr<KernelPlan> forward_only = backend.plan(p, {});
  EXPECT_THROW(forward_only->backward(BackwardArgs{}, nullptr), Error);
}

INSTANTIATE_TEST_SUITE_P(Peers, PeerBackendTest, ::testing::ValuesIn(built_peers()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace attnsuite

#endif  // ATTNSUITE_HAVE_PEERS
