// The PyTorch peers through libtorch (ATen's C++ API): PyTorch's own backend choice, and each of
// its four SDPA backends forced by calling the op that backend is:
//
//   torch-sdpa       at::scaled_dot_product_attention: PyTorch picks (flash, efficient, cuDNN
//                    or math), as a user calling F.scaled_dot_product_attention gets.
//   torch-flash      at::_scaled_dot_product_flash_attention (PyTorch's FlashAttention-2).
//   torch-efficient  at::_efficient_attention_forward (xFormers' memory-efficient kernel).
//   torch-cudnn      at::_scaled_dot_product_cudnn_attention.
//   torch-math       at::_scaled_dot_product_attention_math (matmul, softmax, matmul).
//
// Calling the op is what makes the named backend the one that runs: there is no fallback below
// it, a refusal is an error. supports() asks PyTorch's own gate for the backend
// (sdp::can_use_flash_attention & co., the functions SDPA's dispatch calls, with their reasons
// captured from TORCH_WARN), on metadata-only tensors of the problem's shapes and strides.
//
// Causal masking: attnsuite's is bottom-right aligned; PyTorch's is_causal is top-left. They
// agree when seq_q == seq_kv. Otherwise torch-flash passes is_causal to the flash op (FA2 aligns
// bottom-right), torch-efficient passes xFormers' CausalFromBottomRight mask type, torch-math a
// materialized bool mask — what torch.nn.attention.bias.causal_lower_right does — and
// torch-sdpa and torch-cudnn refuse.
//
// Inputs are wrapped with from_blob (no copies): our (b, s, h, d) views become PyTorch's
// (B, H, S, D) by a transpose of the strides. Every op returns a fresh output (and LSE), which
// a run returns in RunReport::output/output_lse, kept alive by RunReport::owner; the memory they
// take is read from PyTorch's caching allocator statistics around every run.
//
// Backward: through autograd, as training with PyTorch does. A plan made with
// PlanOptions::backward runs its forward with grad mode on and Q, K, V wrapped as leaves that
// require grad, and keeps that forward's graph (the leaves and the output it ends in) until its
// next forward; backward() is torch::autograd::grad of that output with dO as its gradient
// (retain_graph, so it can run any number of times), the backward op of the SDPA backend that
// ran the forward — flash's, xFormers', cuDNN's, or the math backend's matmul and softmax
// backwards. It differentiates the graph its forward recorded, so BackwardArgs' Q, K, V and O
// must be that forward's (its LSE is not read), and it returns fresh dQ, dK, dV in
// RunReport::output_dq/dk/dv like the forward's output. GQA/MQA: dK and dV summed over the
// group as the forward shared K and V — inside flash's and cuDNN's backward (native GQA), by
// autograd through repeat_interleave for torch-efficient and torch-math (what SDPA's math path
// does with enable_gqa). The causal masks are the forward's, and rows that see no key (flash
// and math, causal seq_q > seq_kv) get dQ = 0: their probabilities are 0. PlanOptions::
// deterministic runs the plan under PyTorch's deterministic mode (use_deterministic_algorithms):
// flash's deterministic backward, one key split in xFormers', and PyTorch's refusal where
// there is no deterministic kernel (its cuDNN attention).
#include "peers/torch/torch_sdpa.hpp"

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/transformers/cuda/sdp_utils.h>
#include <ATen/ops/_efficient_attention_forward.h>
#include <ATen/ops/_scaled_dot_product_attention_math.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "attnsuite/error.hpp"
#include "core/cuda_device.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/check.hpp"

namespace attnsuite::peers {
namespace {

// No fmt here: libtorch ships its own fmt headers (another major version, not exported from its
// libraries), and its include directory comes before the system one in this file.
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream text;
  (text << ... << parts);
  return text.str();
}

enum class Kind { Sdpa, Flash, Efficient, Cudnn, Math };

struct KindInfo {
  std::string_view name;
  std::string_view display_name;
  std::string_view capabilities;
};

KindInfo info_of(Kind kind) {
  switch (kind) {
    case Kind::Sdpa:
      return {"torch-sdpa", "PyTorch SDPA (default backend choice)",
              "PyTorch picks flash, efficient, cuDNN or math; fp32/fp16/bf16, GQA/MQA (enable_gqa), causal only "
              "with seq_q == seq_kv (PyTorch's is_causal is top-left); no LSE; backward (autograd, PyTorch's "
              "choice with grad)"};
    case Kind::Flash:
      return {"torch-flash", "FlashAttention-2 (PyTorch flash backend)",
              "fp16/bf16, head dim a multiple of 8 up to 256 (head_dim_v equal), causal bottom-right for any "
              "seq_q/seq_kv, GQA/MQA native, BSHD/BHSD, LSE; backward (autograd: FlashAttention-2's, "
              "deterministic option); sm80+"};
    case Kind::Efficient:
      return {"torch-efficient", "xFormers memory-efficient (PyTorch efficient backend)",
              "fp32/fp16/bf16, head dims 16-byte aligned, causal bottom-right (CausalFromBottomRight), "
              "GQA/MQA by repeat_interleave of K and V (2·B·Skv·Hq·D extra memory, counted), LSE; backward "
              "(autograd: xFormers', dK/dV summed over the group, deterministic option)"};
    case Kind::Cudnn:
      return {"torch-cudnn", "cuDNN attention (PyTorch cuDNN backend)",
              "fp16/bf16, causal only with seq_q == seq_kv (PyTorch's is_causal is top-left), GQA/MQA native, LSE; "
              "backward (autograd: cuDNN's; not deterministic); PyTorch's own graph cache"};
    case Kind::Math:
      return {"torch-math", "PyTorch math backend (materialized)",
              "any dtype and head dim; materializes B·Hq·Sq·Skv scores (fp16/bf16 computed in fp32); causal "
              "(bottom-right) and windows by a materialized bool mask when not square; GQA/MQA by enable_gqa "
              "(repeat_interleave); no LSE; backward (autograd through the matmuls and softmax)"};
  }
  return {};
}

// Collects the TORCH_WARN messages PyTorch's can_use_* gates give with debug = true.
class WarningCollector final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;
};

std::string join(const std::vector<std::string>& parts) {
  std::string joined;
  for (const auto& part : parts) joined += (joined.empty() ? "" : "; ") + part;
  return joined;
}

at::ScalarType scalar_type_of(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return at::kFloat;
    case DType::F16:
      return at::kHalf;
    case DType::BF16:
      return at::kBFloat16;
    case DType::E4M3:
      return at::kFloat8_e4m3fn;  // never asked for: decide() refuses e4m3
  }
  return at::kFloat;
}

// A (b, s, h, d) tensor over data with the view's strides. from_blob with the device given
// does not query the pointer; nothing here reads it either.
at::Tensor wrap(void* data, DType dtype, c10::DeviceIndex device, const std::array<std::int64_t, 4>& shape,
                const std::array<std::int64_t, 4>& strides) {
  return at::for_blob(data, shape)
      .strides(strides)
      .options(at::TensorOptions().dtype(scalar_type_of(dtype)).device(at::kCUDA, device))
      .target_device(at::Device(at::kCUDA, device))
      .make_tensor();
}

// (b, h, s, d) → (b, s, h, d) strides of a TensorView over a PyTorch output.
TensorView view_of_bhsd(const at::Tensor& out, DType dtype, c10::DeviceIndex device) {
  TensorView view;
  view.data = out.data_ptr();
  view.dtype = dtype;
  view.device = {DeviceType::Cuda, device};
  view.shape = {out.size(0), out.size(2), out.size(1), out.size(3)};
  view.strides = {out.stride(0), out.stride(2), out.stride(1), out.stride(3)};
  return view;
}

// Keys that query row i sees as a (seq_q, seq_kv) additive mask (0 or -inf, in the problem's dtype): the problem's
// causal and window bounds around the bottom-right diagonal i + (seq_kv - seq_q).
at::Tensor materialized_mask(const AttentionProblem& p, c10::DeviceIndex device) {
  const auto options = at::TensorOptions().dtype(at::kLong).device(at::kCUDA, device);
  const at::Tensor diagonal = at::arange(p.seq_q, options).add(p.seq_kv - p.seq_q).unsqueeze(1);
  const at::Tensor keys = at::arange(p.seq_kv, options).unsqueeze(0);
  const int right = p.causal ? 0 : p.window_right;
  at::Tensor allowed = right >= 0 ? keys.le(diagonal.add(right)) : keys.ge(0).expand({p.seq_q, p.seq_kv});
  if (p.window_left >= 0) allowed = allowed.logical_and(keys.ge(diagonal.add(-p.window_left)));
  // SDPA's front end turns a bool mask into an additive one before it dispatches; the math op
  // called directly adds whatever it is given to the scores, so a bool mask would add 1 to the
  // allowed keys and mask nothing (measured on the H200: errors up to 3.4 on window cases).
  const auto scalar = scalar_type_of(p.dtype);
  return at::zeros({p.seq_q, p.seq_kv}, options.dtype(scalar))
      .masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

struct ProblemHash {
  std::size_t operator()(const AttentionProblem& p) const {
    std::size_t seed = std::hash<float>{}(p.scale);
    for (int value :
         {p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.head_dim, p.head_dim_v, static_cast<int>(p.dtype),
          static_cast<int>(p.layout), static_cast<int>(p.causal), p.window_left, p.window_right})
      seed ^= std::hash<int>{}(value) + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2);
    return seed;
  }
};

void check_input(std::string_view backend, const char* what, const TensorView& view,
                 const std::array<std::int64_t, 4>& shape, DType dtype) {
  ATTNSUITE_REQUIRE(!view.empty(), concat(backend, ": ", what, " is missing"));
  ATTNSUITE_REQUIRE(view.device.type == DeviceType::Cuda,
                    concat(backend, ": ", what, " is on the ", to_string(view.device.type), ", needs a CUDA device"));
  ATTNSUITE_REQUIRE(view.shape == shape && view.dtype == dtype,
                    concat(backend, ": ", what, " does not match the problem's shape and dtype"));
  if (view.strides[3] != 1) {
    throw Error(ErrorKind::Unsupported, concat(backend, ": ", what, " has last-dim stride ", view.strides[3],
                                               "; PyTorch's attention needs a contiguous last dim"));
  }
}

// PyTorch's deterministic mode (torch.use_deterministic_algorithms(True)) for a scope when
// `enable`, restored after: the switch its kernels read (flash's deterministic backward, one key
// split in xFormers', the cuDNN gate's refusal). The mode is process-global: PyTorch work of
// other threads during the scope sees it too.
class DeterministicScope {
 public:
  explicit DeterministicScope(bool enable) : enable_(enable) {
    if (!enable_) return;
    auto& context = at::globalContext();
    was_on_ = context.deterministicAlgorithms();
    was_warn_only_ = context.deterministicAlgorithmsWarnOnly();
    context.setDeterministicAlgorithms(true, /*warn_only=*/false);
  }
  ~DeterministicScope() {
    if (enable_) at::globalContext().setDeterministicAlgorithms(was_on_, was_warn_only_);
  }
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;

 private:
  bool enable_ = false, was_on_ = false, was_warn_only_ = false;
};

// The tensors one run returned, alive while RunReport::owner holds them.
struct TorchResults {
  at::Tensor output;  // (B, H, Sq, Dv), PyTorch's strides
  at::Tensor lse;     // dense float (B, H, Sq); undefined where the op gives none
};

// One forward: Q, K, V as PyTorch tensors (for a backward plan, the leaves that require grad)
// and what it returned (for a backward plan, the output the recorded graph ends in), alive while
// a RunReport::owner or the backward plan holds them.
struct TorchGraph {
  at::Tensor q, k, v;  // (b, s, h, d) over the caller's buffers
  TorchResults results;
};

// The gradients one backward returned, (b, s, h, d) like the leaves.
struct TorchGradients {
  at::Tensor dq, dk, dv;
};

class TorchBackend;

// One problem's runs. PyTorch allocates each run's output (and LSE; the gradients) itself:
// forward() and backward() return them with the caching allocator's peak during the run.
class TorchPlan final : public KernelPlan {
 public:
  TorchPlan(const TorchBackend& backend, const AttentionProblem& problem, bool backward, bool deterministic)
      : backend_(backend), problem_(problem), backward_(backward), deterministic_(deterministic) {}
  std::string_view kernel_config() const override { return {}; }
  bool produces_own_output() const override { return true; }
  RunReport forward(const AttentionArgs& args, Stream stream) override;
  RunReport backward(const BackwardArgs& args, Stream stream) override;

 private:
  const TorchBackend& backend_;
  AttentionProblem problem_;
  bool backward_ = false;
  bool deterministic_ = false;
  // The last forward's graph (backward plans only): what backward() differentiates.
  std::shared_ptr<TorchGraph> graph_;
};

BackendIdentity identity(Kind kind) {
  const KindInfo info = info_of(kind);
  return {std::string(info.name),
          std::string(info.display_name),
          {DeviceType::Cuda, 0},
          std::string(info.capabilities),
          "PyTorch"};
}

class TorchBackend final : public IdentifiedBackend {
 public:
  explicit TorchBackend(Kind kind) : IdentifiedBackend(identity(kind)), kind_(kind) {}

  Support supports(const AttentionProblem& problem) const override {
    std::lock_guard lock(mutex_);
    auto found = support_cache_.find(problem);
    if (found != support_cache_.end()) return found->second;
    Support support = decide(problem);
    // "No device" is not cached: it is cheap to ask again and may be a transient driver state.
    if (support || support.reason.rfind("no CUDA device", 0) != 0) support_cache_.emplace(problem, support);
    return support;
  }

  // PyTorch's gate for the backend again, asked about inputs that require grad: some of its
  // rules hold for training only (flash: head dims in (192, 224] on sm86/89 and sm120; cuDNN:
  // the head dims its backward has on sm90/sm100). The math backend has a backward for whatever
  // its forward runs, and torch-sdpa's choice falls back to it.
  Support supports_backward(const AttentionProblem& problem) const override {
    const Support forward = supports(problem);
    if (!forward) return forward;
    if (kind_ == Kind::Sdpa || kind_ == Kind::Math) return Support::yes();
    std::lock_guard lock(mutex_);
    auto found = backward_support_cache_.find(problem);
    if (found != backward_support_cache_.end()) return found->second;
    const Support support = asked_pytorch(problem, /*requires_grad=*/true);
    backward_support_cache_.emplace(problem, support);
    return support;
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    const Support support = supports(problem);
    if (!support) throw Error(ErrorKind::Unsupported, concat(name(), ": ", support.reason));
    choose_kernel_config(*this, problem, options);  // refuses a config: there is none
    const bool deterministic = options.backward && options.deterministic;
    if (options.backward) {
      const Support backward = supports_backward(problem);
      if (!backward) throw Error(ErrorKind::Unsupported, concat(name(), ": ", backward.reason));
      // The gate under the deterministic mode: PyTorch refuses its cuDNN attention there ("cuDNN
      // SDPA is not deterministic"). Kernels without a gate (the math backend's) raise
      // PyTorch's own error when they run, if they have no deterministic path.
      if (deterministic && kind_ != Kind::Sdpa && kind_ != Kind::Math) {
        DeterministicScope scope(true);
        const Support gate = asked_pytorch(problem, /*requires_grad=*/true);
        if (!gate) throw Error(ErrorKind::Unsupported, concat(name(), " (deterministic): ", gate.reason));
      }
    }
    return std::make_unique<TorchPlan>(*this, problem, options.backward, deterministic);
  }

  // The op's output (B, H, Sq, Dv) and, where it gives one, its LSE as it returned it, from Q,
  // K, V as (b, s, h, d) tensors. Under the modes and stream guard of the plan's forward().
  std::pair<at::Tensor, at::Tensor> run(const AttentionProblem& p, const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, c10::DeviceIndex device) const {
    at::Tensor output, lse;
    const std::optional<double> scale = p.softmax_scale();
    const bool grouped = p.heads_kv != p.heads_q;
    switch (kind_) {
      case Kind::Sdpa:
        output = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), std::nullopt,
                                                  0.0, p.causal, scale, grouped);
        break;
      case Kind::Flash: {
        auto result = at::_scaled_dot_product_flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                              0.0, p.causal, /*return_debug_mask=*/false, scale);
        output = std::get<0>(result);
        lse = std::get<1>(result);
        break;
      }
      case Kind::Efficient: {
        // xFormers' kernel takes (b, s, h, d) and needs as many K/V heads as Q heads.
        const at::Tensor key = grouped ? k.repeat_interleave(p.group_size(), 2) : k;
        const at::Tensor value = grouped ? v.repeat_interleave(p.group_size(), 2) : v;
        constexpr std::int64_t kNoMask = 0, kCausalFromBottomRight = 2;
        auto result =
            at::_efficient_attention_forward(q, key, value, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                                             std::nullopt, 0.0, p.causal ? kCausalFromBottomRight : kNoMask,
                                             /*compute_log_sumexp=*/true, scale);
        output = std::get<0>(result).transpose(1, 2);
        lse = std::get<1>(result);
        break;
      }
      case Kind::Cudnn: {
        auto result = at::_scaled_dot_product_cudnn_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                              std::nullopt, /*compute_log_sumexp=*/true, 0.0, p.causal,
                                                              /*return_debug_mask=*/false, scale);
        output = std::get<0>(result);
        lse = std::get<1>(result);
        break;
      }
      case Kind::Math: {
        const bool masked = p.window_left >= 0 || p.window_right >= 0 || (p.causal && p.seq_q != p.seq_kv);
        std::optional<at::Tensor> mask;
        if (masked) mask = materialized_mask(p, device);
        output = std::get<0>(at::_scaled_dot_product_attention_math(q.transpose(1, 2), k.transpose(1, 2),
                                                                    v.transpose(1, 2), mask, 0.0, p.causal && !masked,
                                                                    std::nullopt, scale, grouped));
        break;
      }
    }
    const std::array<std::int64_t, 4> expected{p.batch, p.heads_q, p.seq_q, p.dim_v()};
    ATTNSUITE_CHECK(output.dim() == 4 && std::equal(expected.begin(), expected.end(), output.sizes().begin()) &&
                        output.scalar_type() == scalar_type_of(p.dtype),
                    ErrorKind::Internal, concat(name(), ": PyTorch returned an output of another shape or dtype"));
    return {std::move(output), std::move(lse)};
  }

 private:
  Support decide(const AttentionProblem& p) const {
    try {
      p.validate();
    } catch (const Error& error) {
      return Support::no(error.what());
    }
    if (p.dtype == DType::E4M3)
      return Support::no(concat("dtype e4m3 not supported by ", name(),
                                "; allowed: fp32, fp16, bf16 (PyTorch's SDPA "
                                "takes no FP8 inputs)"));
    const bool low_precision = p.dtype == DType::F16 || p.dtype == DType::BF16;
    if ((kind_ == Kind::Flash || kind_ == Kind::Cudnn) && !low_precision)
      return Support::no(concat(name(), " needs fp16 or bf16"));
    if (kind_ != Kind::Math && (p.window_left >= 0 || p.window_right >= 0)) {
      return Support::no(concat("sliding window not supported by ", name(),
                                ": PyTorch's SDPA takes no window (torch-math runs it with a mask)"));
    }
    if (kind_ == Kind::Efficient && p.causal && p.seq_q > p.seq_kv) {
      // Measured on the H200 (torch 2.11): with the bottom-right causal mask, the rows that see
      // no key come back with non-zero O and a finite LSE instead of O = 0, LSE = -inf.
      return Support::no(concat("causal with seq_q ", p.seq_q, " > seq_kv ", p.seq_kv, " not supported by ", name(),
                                ": xFormers' kernel leaves the rows that see no key undefined"));
    }
    if ((kind_ == Kind::Sdpa || kind_ == Kind::Cudnn) && p.causal && p.seq_q != p.seq_kv) {
      return Support::no(concat("causal with seq_q ", p.seq_q, " != seq_kv ", p.seq_kv, " not supported by ", name(),
                                ": PyTorch's is_causal is top-left aligned, attnsuite's bottom-right"));
    }
    if (kind_ == Kind::Flash) {
      if (p.dim_v() != p.head_dim)
        return Support::no(
            concat("head_dim_v ", p.dim_v(), " != head_dim ", p.head_dim, " not supported by torch-flash"));
      if (p.head_dim % 8 != 0 || p.head_dim > 256) {
        return Support::no(
            concat("head dim ", p.head_dim, " not supported by torch-flash; allowed: multiples of 8 up to 256"));
      }
    }
    if (kind_ == Kind::Math) {
      const std::string missing = cuda::cuda_unavailable_reason();
      if (!missing.empty()) return Support::no("no CUDA device available: " + missing);
      return Support::yes();
    }
    Support device_support = cuda::supports_device(name());
    if (!device_support) return device_support;
    if (kind_ == Kind::Sdpa) return Support::yes();  // PyTorch always has math to fall back on
    return asked_pytorch(p, /*requires_grad=*/false);
  }

  // pytorch_gate with PyTorch's own exceptions as the refusal.
  Support asked_pytorch(const AttentionProblem& p, bool requires_grad) const {
    try {
      return pytorch_gate(p, requires_grad);
    } catch (const c10::Error& error) {
      return Support::no(concat(name(), ": ", error.what_without_backtrace()));
    }
  }

  // PyTorch's own verdict for the forced backend on tensors shaped as a run passes them, for
  // inference or (requires_grad) for training. The tensors are metadata only: their address is
  // never dereferenced.
  Support pytorch_gate(const AttentionProblem& p, bool requires_grad) const {
    // The gate sees training only with grad mode on, which inference mode turns off.
    std::optional<c10::InferenceMode> inference;
    std::optional<c10::AutoGradMode> grad_mode;
    if (requires_grad) {
      grad_mode.emplace(true);
    } else {
      inference.emplace();
    }
    int current = 0;
    ATTNSUITE_CUDA_CHECK(cudaGetDevice(&current));
    const auto device = static_cast<c10::DeviceIndex>(current);
    void* const never_read = reinterpret_cast<void*>(std::uintptr_t{1} << 12);
    const bool repeat_kv = kind_ == Kind::Efficient && p.heads_kv != p.heads_q;
    const int kv_heads = repeat_kv ? p.heads_q : p.heads_kv;
    auto tensor = [&](int seq, int heads, int dim, Layout layout) {
      const std::array<std::int64_t, 4> shape{p.batch, seq, heads, dim};
      at::Tensor leaf = wrap(never_read, p.dtype, device, shape, TensorView::dense_strides(shape, layout));
      if (requires_grad) leaf.set_requires_grad(true);
      return leaf.transpose(1, 2);
    };
    // repeat_interleave's result is dense (b, s, h, d), whatever the input's layout.
    const Layout kv_layout = repeat_kv ? Layout::BSHD : p.layout;
    // The flash and efficient ops align is_causal bottom-right, which is the mask wanted; PyTorch's
    // gate refuses is_causal with seq_q != seq_kv because SDPA's is_causal means top-left, so it
    // is asked about the unmasked problem then, as causal_lower_right does.
    const bool gate_causal = p.causal && p.seq_q == p.seq_kv;
    sdp::sdp_params params{tensor(p.seq_q, p.heads_q, p.head_dim, p.layout),
                           tensor(p.seq_kv, kv_heads, p.head_dim, kv_layout),
                           tensor(p.seq_kv, kv_heads, p.dim_v(), kv_layout),
                           std::nullopt,
                           0.0,
                           kind_ == Kind::Cudnn ? p.causal : gate_causal,
                           kv_heads != p.heads_q};
    WarningCollector collector;
    bool ok = false;
    {
      c10::WarningUtils::WarningHandlerGuard guard(&collector);
      switch (kind_) {
        case Kind::Flash:
          ok = sdp::can_use_flash_attention(params, /*debug=*/true);
          break;
        case Kind::Efficient:
          ok = sdp::can_use_mem_efficient_attention(params, /*debug=*/true);
          break;
        case Kind::Cudnn:
          ok = sdp::can_use_cudnn_attention(params, /*debug=*/true);
          break;
        case Kind::Sdpa:
        case Kind::Math:
          ok = true;
          break;
      }
    }
    if (ok) return Support::yes();
    const std::string reason = join(collector.messages);
    return Support::no(concat("PyTorch refuses ", name(), requires_grad ? " with grad" : "", ": ",
                              reason.empty() ? "no reason given" : reason));
  }

  Kind kind_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<AttentionProblem, Support, ProblemHash> support_cache_;
  mutable std::unordered_map<AttentionProblem, Support, ProblemHash> backward_support_cache_;
};

// PyTorch's caching allocator statistics on one device: its peak of allocated bytes during a
// run, minus what was allocated before it (the results of earlier runs that the caller, or a
// backward plan's graph, still holds included).
class AllocatorPeak {
 public:
  AllocatorPeak(std::string_view backend, c10::DeviceIndex device) : backend_(backend), device_(device) {
    try {
      at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
      c10::cuda::CUDACachingAllocator::resetPeakStats(device_);
      baseline_ = allocated().current;
    } catch (const c10::Error& error) {
      throw Error(ErrorKind::Device,
                  concat(backend_, ": caching allocator statistics: ", error.what_without_backtrace()));
    }
  }
  // Bytes above the baseline at the peak since construction.
  std::size_t bytes() const {
    try {
      return static_cast<std::size_t>(std::max<std::int64_t>(0, allocated().peak - baseline_));
    } catch (const c10::Error& error) {
      throw Error(ErrorKind::Device,
                  concat(backend_, ": caching allocator statistics: ", error.what_without_backtrace()));
    }
  }

 private:
  c10::CachingAllocator::Stat allocated() const {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_);
    return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  }

  std::string_view backend_;
  c10::DeviceIndex device_;
  std::int64_t baseline_ = 0;
};

// Runs `body` with PyTorch's exceptions turned into attnsuite's: out of memory, a device error,
// and a TORCH_CHECK of an op (a case it does not take) as Unsupported with PyTorch's message.
template <class Body>
void translating_torch_errors(std::string_view name, Body&& body) {
  try {
    body();
  } catch (const c10::OutOfMemoryError& error) {
    throw Error(ErrorKind::OutOfMemory, concat(name, ": ", error.what_without_backtrace()));
  } catch (const c10::AcceleratorError& error) {
    throw Error(ErrorKind::Device, concat(name, ": ", error.what_without_backtrace()));
  } catch (const c10::Error& error) {
    throw Error(ErrorKind::Unsupported, concat(name, ": ", error.what_without_backtrace()));
  }
}

RunReport TorchPlan::forward(const AttentionArgs& args, Stream stream) {
  const AttentionProblem& problem = problem_;
  const std::string_view name = backend_.name();
  const std::int64_t b = problem.batch;
  check_input(name, "q", args.q, {b, problem.seq_q, problem.heads_q, problem.head_dim}, problem.dtype);
  check_input(name, "k", args.k, {b, problem.seq_kv, problem.heads_kv, problem.head_dim}, problem.dtype);
  check_input(name, "v", args.v, {b, problem.seq_kv, problem.heads_kv, problem.dim_v()}, problem.dtype);

  const auto device = static_cast<c10::DeviceIndex>(args.q.device.index);
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  // The previous forward's graph goes first: what it holds (output, LSE, saved tensors) is freed
  // before this run allocates, unless a RunReport of it still lives.
  graph_.reset();
  const AllocatorPeak peak(name, device);

  auto graph = std::make_shared<TorchGraph>();
  TorchResults& results = graph->results;
  RunReport report;
  translating_torch_errors(name, [&] {
    // Forward-only plans run in inference mode (no autograd bookkeeping); backward plans with
    // grad mode on, whatever the calling thread's modes are.
    std::optional<c10::InferenceMode> inference;
    std::optional<c10::AutoGradMode> grad_mode;
    if (backward_) {
      inference.emplace(false);
      grad_mode.emplace(true);
    } else {
      inference.emplace();
    }
    const DeterministicScope deterministic(deterministic_);
    c10::cuda::CUDAStreamGuard stream_guard(c10::cuda::getStreamFromExternal(cuda_stream, device));
    graph->q = wrap(args.q.data, problem.dtype, device, args.q.shape, args.q.strides);
    graph->k = wrap(args.k.data, problem.dtype, device, args.k.shape, args.k.strides);
    graph->v = wrap(args.v.data, problem.dtype, device, args.v.shape, args.v.strides);
    if (backward_)
      for (at::Tensor* leaf : {&graph->q, &graph->k, &graph->v}) leaf->set_requires_grad(true);
    at::Tensor lse;
    std::tie(results.output, lse) = backend_.run(problem, graph->q, graph->k, graph->v, device);
    report.own_peak_memory_bytes = peak.bytes();
    if (lse.defined()) {
      // PyTorch's LSE as attnsuite's: dense float (B, H, Sq), -inf where a row sees no key. The
      // kernels' own forms differ (efficient pads Sq to a multiple of 32, cuDNN adds a trailing
      // 1, flash writes +inf for empty rows): a view where it already is that, else a copy, made
      // after the peak was read. Rows without a key are the first or the last (key ranges move
      // monotonically with the query). The graph keeps the op's own LSE for its backward.
      lse = lse.dim() == 4 ? lse.select(3, 0) : lse;
      lse = lse.narrow(2, 0, problem.seq_q);
      const auto unseen = [&](int query) { return problem.key_begin(query) >= problem.key_end(query); };
      if (problem.seq_q > 0 && (unseen(0) || unseen(problem.seq_q - 1)))
        lse = lse.masked_fill(lse.isposinf(), -std::numeric_limits<double>::infinity());
      results.lse = lse.contiguous();
    }
  });
  report.output = view_of_bhsd(results.output, problem.dtype, device);
  if (results.lse.defined()) report.output_lse = {results.lse.data_ptr<float>(), {DeviceType::Cuda, device}};
  if (backward_) graph_ = graph;
  report.owner = std::move(graph);
  return report;
}

RunReport TorchPlan::backward(const BackwardArgs& args, Stream stream) {
  if (!backward_) return KernelPlan::backward(args, stream);  // throws: not a backward plan
  const AttentionProblem& problem = problem_;
  const std::string_view name = backend_.name();
  ATTNSUITE_CHECK(graph_ != nullptr, ErrorKind::Usage,
                  concat(name,
                         ": backward() before forward(): PyTorch's autograd differentiates the graph the "
                         "plan's forward recorded"));
  // The graph is of that forward's inputs and output: other tensors would get the gradients of
  // another problem instance.
  const bool same_inputs = args.q.data == graph_->q.data_ptr() && args.k.data == graph_->k.data_ptr() &&
                           args.v.data == graph_->v.data_ptr() && args.o.data == graph_->results.output.data_ptr();
  ATTNSUITE_CHECK(same_inputs, ErrorKind::Usage,
                  concat(name,
                         ": backward() takes the Q, K, V of the plan's last forward and the O it returned "
                         "(PyTorch's autograd differentiates the graph that forward recorded)"));
  const std::int64_t b = problem.batch;
  check_input(name, "d_o", args.d_o, {b, problem.seq_q, problem.heads_q, problem.dim_v()}, problem.dtype);

  const auto device = static_cast<c10::DeviceIndex>(args.d_o.device.index);
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const AllocatorPeak peak(name, device);
  auto gradients = std::make_shared<TorchGradients>();
  RunReport report;
  translating_torch_errors(name, [&] {
    const c10::InferenceMode no_inference(false);
    const c10::AutoGradMode grad_mode(true);
    const DeterministicScope deterministic(deterministic_);
    // The engine runs each node on the stream its forward ran on (this plan's forward: the
    // caller's stream) and makes the calling stream wait for the gradients.
    c10::cuda::CUDAStreamGuard stream_guard(c10::cuda::getStreamFromExternal(cuda_stream, device));
    const at::Tensor d_o = wrap(args.d_o.data, problem.dtype, device, args.d_o.shape, args.d_o.strides).transpose(1, 2);
    const std::vector<at::Tensor> grads =
        torch::autograd::grad({graph_->results.output}, {graph_->q, graph_->k, graph_->v}, {d_o},
                              /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/false);
    report.own_peak_memory_bytes = peak.bytes();
    ATTNSUITE_CHECK(grads.size() == 3, ErrorKind::Internal,
                    concat(name, ": autograd returned ", grads.size(), " gradients for Q, K, V"));
    gradients->dq = grads[0];
    gradients->dk = grads[1];
    gradients->dv = grads[2];
  });
  // The gradients have their leaves' (b, s, h, d) shapes; their strides are PyTorch's.
  const auto view = [&](const at::Tensor& gradient, const at::Tensor& leaf, const char* what) {
    ATTNSUITE_CHECK(gradient.defined() && gradient.sizes() == leaf.sizes() &&
                        gradient.scalar_type() == scalar_type_of(problem.dtype),
                    ErrorKind::Internal, concat(name, ": PyTorch returned a ", what, " of another shape or dtype"));
    TensorView out;
    out.data = gradient.data_ptr();
    out.dtype = problem.dtype;
    out.device = {DeviceType::Cuda, device};
    for (int dim = 0; dim < 4; ++dim) {
      out.shape[dim] = gradient.size(dim);
      out.strides[dim] = gradient.stride(dim);
    }
    return out;
  };
  report.output_dq = view(gradients->dq, graph_->q, "dQ");
  report.output_dk = view(gradients->dk, graph_->k, "dK");
  report.output_dv = view(gradients->dv, graph_->v, "dV");
  report.owner = std::move(gradients);
  return report;
}

}  // namespace

}  // namespace attnsuite::peers

// Creating a backend touches neither libtorch's CUDA state nor a GPU.
attnsuite::Backend* attnsuite_torch_peer_create(const char* name) {
  using namespace attnsuite::peers;
  for (Kind kind : {Kind::Sdpa, Kind::Flash, Kind::Efficient, Kind::Cudnn, Kind::Math})
    if (info_of(kind).name == name) return new TorchBackend(kind);
  return nullptr;
}
