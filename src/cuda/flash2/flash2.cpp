// `flash2`: attnsuite's FlashAttention-2-class fused forward (kernel.cuh), as a Backend.
// Host side only: the supports() rules and the params the kernel reads.
#include "cuda/flash2/flash2.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <numbers>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnsuite/error.hpp"
#include "cuda/common/attention_params.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/backward_workspace.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/flash2/configs.hpp"
#include "cuda/flash2/launch.hpp"
#ifdef ATTNSUITE_FLASH2_VARIANTS
#include "cuda/flash2/variants/variants.hpp"
#endif

namespace attnsuite::cuda::flash2 {

Params make_params(const AttentionProblem& problem, const AttentionArgs& args) {
  Params params;
  fill_attention_params(params, problem, args);
  return params;
}

// cp.async moves 16-byte chunks: every row start must be 16-byte aligned.
bool rows_aligned(const TensorView& view) {
  constexpr std::int64_t kElementsPer16Bytes = 8;
  return reinterpret_cast<std::uintptr_t>(view.data) % 16 == 0 && view.strides[0] % kElementsPer16Bytes == 0 &&
         view.strides[1] % kElementsPer16Bytes == 0 && view.strides[2] % kElementsPer16Bytes == 0;
}

}  // namespace attnsuite::cuda::flash2

namespace attnsuite::cuda {
namespace {

// A variant is an experimental configuration (bf16, one head dim); nullptr is flash2 itself.
struct VariantInfo {
  std::string name;
  int head_dim = 0;
  void (*launch)(const flash2::Params&, void*) = nullptr;
};

// Why the backward stops below head dim 256 (its refusal says so).
constexpr std::string_view kNoBackwardAt256 =
    "at 256 a warp's dK and dV of its 16 keys alone would be 256 fp32 registers per thread, above the 255 a thread can "
    "have";

class Flash2Backend final : public Backend {
 public:
  Flash2Backend() = default;
  explicit Flash2Backend(VariantInfo variant)
      : name_("flash2-x-" + variant.name),
        display_name_("flash2 experimental variant " + variant.name),
        variant_(std::move(variant)) {}

  std::string_view name() const override { return name_; }
  std::string_view display_name() const override { return display_name_; }
  Device device() const override { return {DeviceType::Cuda, 0}; }
  std::string capabilities() const override {
    return "fp16/bf16, head dim 64/128/256, causal, sliding window, GQA/MQA, seq_q != seq_kv, "
           "BSHD/BHSD, LSE; sm80+ (mma.sync); backward (experimental, opt-in): head dim 64/128, "
           "deterministic option";
  }

  // The backward is experimental (it passes its GPU tests but runs 0.69-0.82x FlashAttention-2's
  // backward on the H100, docs/kernels/flash2.md): plans refuse it unless experimental_backward is "1";
  // backward_key_tile (64 or 128) sets the key-row main kernel's keys per CTA (backward_traits.cuh);
  // backward_split "keys" (the default: each warp owns 16 keys) or "tiles" (FlashAttention-2's
  // split among 8 warps, 128 keys; experimental, not yet run on a GPU: backward_tiles_kernel.cuh);
  // backward_preprocess "vector" (the default: 16-byte accesses, flash3's default too) or "warp"
  // (one warp a row): common/backward_row_kernels.cuh.
  std::vector<std::string> option_keys() const override {
    if (variant_.launch != nullptr) return {};
    return {std::string(kExperimentalBackwardOption), std::string(kBackwardKeyTile), std::string(kBackwardSplit),
            std::string(kBackwardPreprocess)};
  }
  void check_options(const std::map<std::string, std::string>& options) const override {
    (void)experimental_backward_opted_in(name(), options);
    (void)backward_main(options);
    (void)vector_preprocess(options);
  }
  std::string_view backward_status() const override {
    return variant_.launch != nullptr ? std::string_view{}
                                      : std::string_view{
                                            "experimental: opt-in while slower than FlashAttention-2's; "
                                            "backward_split=tiles not yet run on a GPU"};
  }

  // The head dim rule first (it needs no device), then the forward's.
  Support supports_backward(const AttentionProblem& problem) const override {
    if (variant_.launch != nullptr) return Support::no(fmt::format("{} has no backward pass", name_));
    const Support head_dim = supports_backward_head_dim("flash2", problem, flash2::kBackwardHeadDims, kNoBackwardAt256);
    if (!head_dim) return head_dim;
    return supports(problem);
  }

  Support supports(const AttentionProblem& problem) const override {
    Support support = supports_problem_common(name(), problem);
    if (!support) return support;
    support = supports_shape("flash2", problem, flash2::kSupportedHeadDims);
    if (!support) return support;
    if (variant_.launch != nullptr && (problem.dtype != DType::BF16 || problem.head_dim != variant_.head_dim)) {
      return Support::no(fmt::format("{} is compiled for bf16, head dim {} only", name_, variant_.head_dim));
    }
    return supports_device(name());
  }

  // "default" (Config<> of traits.cuh) and the alternatives compiled for this head dim
  // (configs.hpp); a variant backend is one fixed configuration.
  std::vector<std::string> kernel_configs(const AttentionProblem& problem) const override {
    if (variant_.launch != nullptr) return {};
    std::vector<std::string> names{"default"};
    for (const flash2::AlternativeConfig& config : flash2::alternative_configs())
      if (config.head_dim == problem.head_dim) names.emplace_back(config.name);
    return names;
  }
  KernelConfigKey kernel_config_key(const AttentionProblem& problem, const PlanOptions& options) const override {
    return cuda::kernel_config_key(plan_device(options), name_, problem);
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    // The opt-in first: its refusal needs no device, so that it reads the same everywhere.
    const bool backward = options.backward && variant_.launch == nullptr;
    if (backward && !experimental_backward_opted_in(name(), options.options)) {
      throw Error(ErrorKind::Unsupported,
                  fmt::format("flash2's backward is experimental: correct on the GPU, slower than "
                              "FlashAttention-2's backward; opt in with the backend option {}=1 "
                              "(bench --backend-option {}=1)",
                              kExperimentalBackwardOption, kExperimentalBackwardOption));
    }
    const bool deterministic = options.deterministic;
    const flash2::BackwardMain main = backward_main(options.options);
    const bool vector = vector_preprocess(options.options);
    if (backward)
      if (const Support support = supports_backward(problem); !support)
        throw Error(ErrorKind::Unsupported, name_ + ": " + support.reason);
    require_support(*this, problem);
    // "" for a variant (nothing to choose), "default" or an alternative of this head dim.
    std::string config = choose_kernel_config(*this, problem, options);
    const flash2::AlternativeConfig* alternative = nullptr;
    for (const flash2::AlternativeConfig& candidate : flash2::alternative_configs())
      if (config == candidate.name && candidate.head_dim == problem.head_dim) alternative = &candidate;
    FunctionPlan::Forward forward = [this, problem, alternative](const AttentionArgs& args, Stream stream, RunReport&) {
      run(problem, args, alternative, stream);
    };
    if (!backward) return std::make_unique<FunctionPlan>(std::move(config), 0, std::move(forward));
    return std::make_unique<FunctionPlan>(
        std::move(config), 0, std::move(forward),
        [this, problem, deterministic, main, vector](const BackwardArgs& args, Stream stream, RunReport&) {
          run_backward(problem, args, deterministic, main, vector, stream);
        },
        backward_workspace_bytes(problem, deterministic));
  }

 private:
  // `alternative`: nullptr runs the default configuration (or the variant).
  void run(const AttentionProblem& problem, const AttentionArgs& args, const flash2::AlternativeConfig* alternative,
           Stream stream) const {
    check_cuda_args(name(), problem, args);
    for (const TensorView* view : {&args.q, &args.k, &args.v, &args.o}) {
      if (!flash2::rows_aligned(*view)) {
        throw Error(ErrorKind::Unsupported,
                    "flash2: every row of Q, K, V and O must start 16-byte aligned (base pointer, and "
                    "batch/seq/head strides multiples of 8 elements)");
      }
    }

    const flash2::Params params = flash2::make_params(problem, args);
    if (variant_.launch != nullptr) {
      variant_.launch(params, stream);
    } else if (alternative == nullptr) {
      flash2::launch_forward(params, problem.dtype, stream);
    } else {
      (problem.dtype == DType::F16 ? alternative->launch_fp16 : alternative->launch_bf16)(params, stream);
    }
  }

  static constexpr std::string_view kBackwardKeyTile = "backward_key_tile";
  static constexpr std::string_view kBackwardSplit = "backward_split";
  static constexpr std::string_view kBackwardPreprocess = "backward_preprocess";

  // The main kernel from the backward_split option, "keys" (absent: keys) or "tiles", and
  // backward_key_tile, "64" (absent: 64) or "128" (the key-row kernel's; the tiled kernel has 128
  // keys, so 64 with it is refused); another value of either is refused.
  static flash2::BackwardMain backward_main(const std::map<std::string, std::string>& options) {
    static constexpr std::string_view kKeyTiles[] = {"64", "128"};
    static constexpr std::string_view kSplits[] = {"keys", "tiles"};
    const bool keys_128 = cuda::option_choice("flash2", options, kBackwardKeyTile, kKeyTiles) == 1;
    if (cuda::option_choice("flash2", options, kBackwardSplit, kSplits) == 0)
      return keys_128 ? flash2::BackwardMain::KeyRows128 : flash2::BackwardMain::KeyRows64;
    if (options.contains(std::string(kBackwardKeyTile)) && !keys_128) {
      throw Error(ErrorKind::Usage,
                  fmt::format("flash2: backend option {}='{}' not allowed with {}=tiles (128-key tiles); allowed: 128",
                              kBackwardKeyTile, options.at(std::string(kBackwardKeyTile)), kBackwardSplit));
    }
    return flash2::BackwardMain::Tiles;
  }

  // The backward_preprocess option: "vector" (absent: vector) or "warp"; another value is refused.
  static bool vector_preprocess(const std::map<std::string, std::string>& options) {
    static constexpr std::string_view kAllowed[] = {"vector", "warp"};
    return cuda::option_choice("flash2", options, kBackwardPreprocess, kAllowed) == 0;
  }

  void run_backward(const AttentionProblem& problem, const BackwardArgs& args, bool deterministic,
                    flash2::BackwardMain main, bool vector, Stream stream) const {
    check_cuda_backward_args(name(), problem, args);
    for (const TensorView* view : {&args.q, &args.k, &args.v, &args.o, &args.d_o, &args.dq, &args.dk, &args.dv}) {
      if (!flash2::rows_aligned(*view)) {
        throw Error(ErrorKind::Unsupported,
                    "flash2: every row of Q, K, V, O, dO, dQ, dK and dV must start 16-byte aligned (base pointer, "
                    "and batch/seq/head strides multiples of 8 elements)");
      }
    }
    require_backward_workspace(name(), args, backward_workspace_bytes(problem, deterministic));
    flash2::launch_backward(make_backward_params(problem, args, deterministic), problem.dtype, main, vector, stream);
  }

  std::string name_ = "flash2";
  std::string display_name_ = "flash2 (attnsuite FlashAttention-2-class kernel)";
  VariantInfo variant_;
};

}  // namespace

std::unique_ptr<Backend> make_flash2_backend() { return std::make_unique<Flash2Backend>(); }

void register_flash2_variants([[maybe_unused]] Registry& registry) {
#ifdef ATTNSUITE_FLASH2_VARIANTS
  for (std::size_t i = 0; i < flash2::variant_count(); ++i) {
    const flash2::Variant& variant = flash2::variants()[i];
    registry.add(std::string("flash2-x-") + variant.name, [variant] {
      return std::unique_ptr<Backend>(new Flash2Backend(VariantInfo{variant.name, variant.head_dim, variant.launch}));
    });
  }
#endif
}

}  // namespace attnsuite::cuda
