// `flash3`: attnsuite's FlashAttention-3-class Hopper forward (kernel.cuh), as a Backend.
// Host side only: the supports() rules, what TMA can express, and the params the kernel reads.
#include "cuda/flash3/flash3.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "attnsuite/error.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "cuda/common/attention_params.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/backward_workspace.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/flash3/launch.hpp"
#include "cuda/flash3/tensor_map.hpp"

namespace attnsuite::cuda {

// wgmma and TMA as compiled here (sm_90a) run on compute capability 9.0 only.
Support supports_hopper(std::string_view backend) {
  const std::optional<int> capability = current_compute_capability();
  if (!capability) return Support::no("no CUDA device available: could not query the current device");
  if (*capability != 90) {
    return Support::no(fmt::format("{} needs sm_90 (Hopper); this GPU is sm_{}", backend, *capability));
  }
  return Support::yes();
}

std::vector<std::string> Flash3FamilyBackend::kernel_configs(const AttentionProblem& problem) const {
  return schedule_.names(problem);
}

KernelConfigKey Flash3FamilyBackend::kernel_config_key(const AttentionProblem& problem,
                                                       const PlanOptions& options) const {
  return cuda::kernel_config_key(plan_device(options), std::string(name()), problem);
}

Support Flash3FamilyBackend::supports_kernel(const AttentionProblem& problem, std::span<const int> head_dims) const {
  Support support = supports_shape(name(), problem, head_dims);
  if (!support) return support;
  support = supports_device(name());
  if (!support) return support;
  return supports_hopper(name());
}

void Flash3FamilyBackend::check_16_byte_layout(const AttentionArgs& args, std::string_view read_how,
                                               int qkv_element_bytes) const {
  check_16_byte_views({{"q", &args.q, qkv_element_bytes},
                       {"k", &args.k, qkv_element_bytes},
                       {"v", &args.v, qkv_element_bytes},
                       {"o", &args.o, 2}},
                      read_how);
}

void Flash3FamilyBackend::check_16_byte_views(std::initializer_list<NamedView> views, std::string_view read_how) const {
  for (const NamedView& named : views) {
    const TensorView& view = *named.view;
    const std::string problem_text =
        flash3::tma_layout_problem(view.data, view.strides[0], view.strides[1], view.strides[2], named.element_bytes);
    if (!problem_text.empty()) {
      throw Error(ErrorKind::Unsupported,
                  fmt::format("{}: {} cannot be {}: {}", name(), named.name, read_how, problem_text));
    }
  }
}

namespace {

// Why the backward stops below head dim 256 (its refusal says so).
constexpr std::string_view kNoBackwardAt256 =
    "at 256 a consumer thread's dK and dV of its warpgroup's 64 keys alone would be 256 fp32 registers, above the 240 "
    "setmaxnreg gives it";

class Flash3Backend final : public Flash3FamilyBackend {
 public:
  Flash3Backend()
      : Flash3FamilyBackend(
            {"flash3",
             "flash3 (attnsuite FlashAttention-3-class Hopper kernel)",
             {DeviceType::Cuda, 0},
             "fp16/bf16, head dim 64/128/256, causal, sliding window, GQA/MQA, seq_q != seq_kv, "
             "BSHD/BHSD (16-byte aligned strides), LSE; sm_90 only (wgmma, TMA); backward: head dim 64/128, "
             "dQ by bulk reductions (no deterministic mode), options backward_epilogue=4-byte|16-byte and "
             "backward_order=grouped-4|head-major (16-byte at d64 opt-in: correct on the H100, speed not yet "
             "measured), backward_preprocess=vector|warp (vector, the default: 16-byte accesses); "
             "kernel config "
             "m192-fmaexp (d64, opt-in: 0.96x m192 on the H100); n80 (80-key tiles) at d256 dense from N 1k "
             "and causal at N 512 and above 4k; "
             "causal problems (sliding windows included) run paired on persistent CTAs (a head's longest and "
             "shortest query tiles together; m192 at d64, the default tiles at d128, and at d256 from seq_q "
             "1k to 4k), non-causal windowed ones at d64 longest first; option "
             "forward_order=head-major|longest-first|paired (longest-first with m192 or the default tiles "
             "at d64/d128: slower than paired)"},
            /*with_tile_configs=*/true) {}

  Support supports(const AttentionProblem& problem) const override {
    const Support support = supports_problem_common(name(), problem);
    if (!support) return support;
    return supports_kernel(problem, flash3::kSupportedHeadDims);
  }

  // backward_epilogue: "4-byte" or "16-byte" (dK and dV stored 16 bytes a lane after a transpose
  // within each quad: common/backward_epilogue.cuh); absent: the head dim's default (launch.hpp).
  // backward_preprocess: "vector" (the default: 16-byte accesses, kHeadDim / 8 lanes a row) or
  // "warp" (one warp a row, 2-byte accesses): common/backward_row_kernels.cuh. Measured on the
  // H100 (2026-12-07, docs/results/h100/2026-12-07d/, Llama-3.2-1B attention B4 N 2048 causal,
  // Nsight Compute): 44.2 µs against 117.0 µs, the backward 0.546 against 0.617 ms.
  // backward_order: "grouped-4" (4 heads' key tiles interleaved in the grid: the default, built
  // with each head dim's default epilogue) or "head-major" (a head's key tiles in a row; every
  // epilogue): backward_traits.cuh.
  // forward_order: "head-major" (each head's query tiles in a row, persistent CTAs on unmasked
  // problems only), "longest-first" (d64/d128, the default tiles or kernel config m192 at d64:
  // persistent CTAs on every problem, the works in bands of one query tile over all heads, the
  // longest first) or "paired" (m192 at d64, the default tiles at d128 and d256:
  // persistent CTAs over units of a head's longest and shortest query tiles, head-major) —
  // hopper/scheduler.cuh; absent: builtin_order.
  std::vector<std::string> option_keys() const override {
    return {std::string(kBackwardEpilogue), std::string(kBackwardOrder), std::string(kBackwardPreprocess),
            std::string(kForwardOrder)};
  }
  void check_options(const std::map<std::string, std::string>& options) const override {
    (void)backward_variant(options);
    (void)forward_order(options);
  }

  // Head dims 64 and 128 (dQ's tile splits into 64 × 64 wgmma tiles: backward_traits.cuh), then the forward's rules.
  Support supports_backward(const AttentionProblem& problem) const override {
    const Support head_dim = supports_backward_head_dim("flash3", problem, flash3::kBackwardHeadDims, kNoBackwardAt256);
    if (!head_dim) return head_dim;
    return supports(problem);
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    // The backward's own rules first: their refusals need no device.
    const flash3::BackwardVariant variant = backward_variant(options.options);
    if (options.backward) {
      if (options.deterministic) {
        throw Error(ErrorKind::Unsupported,
                    "flash3's backward has no deterministic mode (dQ is summed with atomics); flash2's backward "
                    "has one");
      }
      if (const Support support = supports_backward(problem); !support)
        throw Error(ErrorKind::Unsupported, fmt::format("flash3: {}", support.reason));
    }
    const int order = forward_order(options.options);
    // Asked for an order with kernels of its own (kOrders after head-major: longest first, paired):
    // the default tiles, or the kernel config asked for too, where launch.cu's
    // table has that kernel.
    const bool asked_order = order > 0;
    const hopper::WorkOrder asked_work_order = kWorkOrders[std::max(order, 0)];
    const std::string_view order_name = kOrders[std::max(order, 0)];
    std::string config = options.kernel_config.empty() ? std::string("default") : options.kernel_config;
    if (asked_order && !flash3::has_ordered_kernel(asked_work_order, problem.head_dim, config))
      throw Error(
          ErrorKind::Unsupported,
          fmt::format("flash3: forward_order={} is built for {}; not for {} at head dim {}", order_name,
                      flash3::ordered_kernels(asked_work_order), flash3::describe_tiles(config), problem.head_dim));
    require_support(*this, problem);
    if (!asked_order) config = choose_kernel_config(*this, problem, options);
    // The built-in order: causal problems run paired on persistent CTAs with m192 (d64) and with
    // the default tiles at d128. Measured on the H100 (2026-12-07, docs/results/h100/2026-12-07c/,
    // bf16, B·N = 16384, one run): causal d64 N 512, 1k, 2k, 4k 0.170, 0.252, 0.344, 0.594 ms
    // against m192 longest first's 0.175, 0.258, 0.368, 0.644 (1.03-1.08x; longest first was
    // itself 1.02-1.19x the grid); d128 0.137, 0.177, 0.266, 0.456, 0.844 (N 512..8k) against the
    // grid's 0.150, 0.199, 0.296, 0.494 and n176's 0.862 (1.08-1.12x, 1.02x at 8k); at 16k n176's
    // grid 1.558 against paired 1.620, so n176 keeps causal N > 8k (Flash3Schedule::builtin).
    // Nsight Compute at causal d128 N 1k: paired 182 µs, L2 hit rate 69%, DRAM 43% of peak; the
    // grid 203 µs (67%, 39%); longest first 259 µs (34%, 82%: its bands spread the CTAs in flight
    // over ~132 heads, each head's K and V read from DRAM once per query tile). Causal with a
    // 256-key window (2026-12-07d, N 2k / 4k): paired 0.156 / 0.158 ms against the grid's 0.168 /
    // 0.171 at d128, m192 paired 0.188 / 0.202 against m192 longest first's 0.199 / 0.203 at d64
    // (which was 1.22-1.24x its grid, 2026-12-07b); non-causal windows keep longest first at d64.
    // d256 causal (2026-12-07d): paired 0.174, 0.259, 0.441, 1.55 ms at N 1k, 2k, 4k, 16k against
    // the grid's 0.179, 0.277, 0.474, 1.52 — paired up to seq_q 4096. A kernel not yet run on a
    // GPU is never the built-in choice (launch.cu's table).
    const hopper::WorkOrder work_order = order < 0 ? builtin_order(problem, config) : asked_work_order;
    const Flash3Schedule::Choice choice = Flash3Schedule::parse(config);
    const bool persistent = persistent_ctas(problem, choice, work_order);
    FunctionPlan::Forward forward = [this, problem, choice, work_order, persistent](const AttentionArgs& args,
                                                                                    Stream stream, RunReport&) {
      run(problem, args, choice, work_order, persistent, stream);
    };
    std::unique_ptr<FunctionPlan> plan =
        options.backward ? std::make_unique<FunctionPlan>(
                               std::move(config), 0, std::move(forward),
                               [this, problem, variant](const BackwardArgs& args, Stream stream, RunReport&) {
                                 run_backward(problem, args, variant, stream);
                               },
                               backward_workspace_bytes(problem, /*deterministic=*/false))
                         : std::make_unique<FunctionPlan>(std::move(config), 0, std::move(forward));
    plan->set_work_order(std::string(work_order_name(work_order, persistent)));
    return plan;
  }

 private:
  static constexpr std::string_view kBackwardEpilogue = "backward_epilogue";
  static constexpr std::string_view kBackwardOrder = "backward_order";
  static constexpr std::string_view kForwardOrder = "forward_order";
  static constexpr std::string_view kBackwardPreprocess = "backward_preprocess";

  // The built-in order of a problem run with kernel config `config` (plan()): masked problems
  // on persistent CTAs where launch.cu's table has the config's kernel in that order and it ran
  // on a GPU — causal ones (a sliding window or not) paired (d256 up to seq_q 4096), non-causal
  // windowed ones longest first with m192; the rest head-major.
  static hopper::WorkOrder builtin_order(const AttentionProblem& problem, const std::string& config) {
    if (!problem.has_mask()) return hopper::WorkOrder::HeadMajor;
    const bool paired_measured = problem.head_dim != 256 || problem.seq_q <= 4096;
    if (problem.causal && paired_measured &&
        flash3::has_ordered_kernel(hopper::WorkOrder::Paired, problem.head_dim, config, true))
      return hopper::WorkOrder::Paired;
    if (config == "m192" && flash3::has_ordered_kernel(hopper::WorkOrder::LongestFirst, problem.head_dim, config, true))
      return hopper::WorkOrder::LongestFirst;
    return hopper::WorkOrder::HeadMajor;
  }

  // forward_order: absent (-1: the built-in order, builtin_order), else the index of its value in
  // kOrders (kWorkOrders[i] the order it asks for); another value is refused.
  static constexpr std::string_view kOrders[] = {"head-major", "longest-first", "paired"};
  static constexpr hopper::WorkOrder kWorkOrders[] = {hopper::WorkOrder::HeadMajor, hopper::WorkOrder::LongestFirst,
                                                      hopper::WorkOrder::Paired};
  static int forward_order(const std::map<std::string, std::string>& options) {
    if (!options.contains(std::string(kForwardOrder))) return -1;
    return static_cast<int>(cuda::option_choice("flash3", options, kForwardOrder, kOrders));
  }

  // The backward options: backward_epilogue absent (the head dim's default), "4-byte" or "16-byte";
  // backward_order "grouped-4" or "head-major"; absent: grouped-4 with the default epilogue,
  // head-major with an explicit one (grouped-4 is built with the default epilogue only, so the two
  // given together are refused); another value is refused.
  static flash3::BackwardVariant backward_variant(const std::map<std::string, std::string>& options) {
    static constexpr std::string_view kEpilogues[] = {"4-byte", "16-byte"};
    static constexpr std::string_view kOrders[] = {"grouped-4", "head-major"};
    static constexpr std::string_view kPreprocesses[] = {"vector", "warp"};
    flash3::BackwardVariant variant;
    variant.vector_preprocess = cuda::option_choice("flash3", options, kBackwardPreprocess, kPreprocesses) == 0;
    if (options.contains(std::string(kBackwardEpilogue)))
      variant.epilogue_bytes = cuda::option_choice("flash3", options, kBackwardEpilogue, kEpilogues) == 1 ? 16 : 4;
    const bool grouped = cuda::option_choice("flash3", options, kBackwardOrder, kOrders) == 0;
    variant.grouped_heads = grouped && (options.contains(std::string(kBackwardOrder)) || variant.epilogue_bytes == 0);
    if (!flash3::backward_variant_built(variant))
      throw Error(ErrorKind::Usage,
                  "flash3: backward_order=grouped-4 is built with each head dim's default epilogue; drop "
                  "backward_epilogue");
    return variant;
  }

  // Q, K, V and dO are read by TMA (16-byte aligned bases and strides); O, dQ, dK and dV are
  // written or read 4 bytes at a time by rows, held to the same rule.
  void run_backward(const AttentionProblem& problem, const BackwardArgs& args, flash3::BackwardVariant variant,
                    Stream stream) const {
    check_cuda_backward_args(name(), problem, args);
    check_16_byte_views({{"q", &args.q},
                         {"k", &args.k},
                         {"v", &args.v},
                         {"o", &args.o},
                         {"dO", &args.d_o},
                         {"dQ", &args.dq},
                         {"dK", &args.dk},
                         {"dV", &args.dv}},
                        "read by TMA");
    require_backward_workspace(name(), args, backward_workspace_bytes(problem, false));
    flash3::launch_backward(make_backward_params(problem, args, false), problem.dtype, variant, stream);
  }

  // Persistent CTAs for unmasked attention only: their static round-robin over the work tiles
  // (kernel.cuh) leaves the CTAs that drew the long diagonal works of a causal problem running
  // alone at the end — measured on the H200 (fa3-grid, 2026-12-04 third session) 1.38-1.68x
  // slower than one CTA per work at causal N >= 8k (d128, d256), 1.00-1.05x at N <= 4k, and
  // m192 1.24-1.43x at causal N 1k-4k; dense, 1.00-1.27x faster (N 512: 1.23x at d128).
  // Paired (the built-in order of causal problems) and longest first (of non-causal windows
  // with m192): their orders balance the round-robin under a mask too (hopper/scheduler.cuh).
  static bool persistent_ctas(const AttentionProblem& problem, Flash3Schedule::Choice choice, hopper::WorkOrder order) {
    return order != hopper::WorkOrder::HeadMajor || (choice.kind != Flash3Schedule::Kind::Grid && !problem.has_mask());
  }
  // The plan's work_order (result rows' column): the order's option value, head-major split into
  // "persistent" (min(works, SMs) CTAs that loop) and "grid" (one CTA per work).
  static std::string_view work_order_name(hopper::WorkOrder order, bool persistent) {
    if (order == hopper::WorkOrder::Paired) return "paired";
    if (order == hopper::WorkOrder::LongestFirst) return "longest-first";
    return persistent ? "persistent" : "grid";
  }

  void run(const AttentionProblem& problem, const AttentionArgs& args, Flash3Schedule::Choice choice,
           hopper::WorkOrder order, bool persistent, Stream stream) const {
    check_cuda_args(name(), problem, args);
    // Q, K, V are read by TMA, whose descriptors need 16-byte aligned bases and strides; O is
    // held to the same rule (its rows are written in 16-byte-aligned pieces by the no-key path).
    check_16_byte_layout(args, "read by TMA");

    flash3::Params params;
    fill_attention_params(params, problem, args);
    params.serial_schedule = choice.kind == Flash3Schedule::Kind::V1;
    params.persistent = persistent;
    const bool ordered = order != hopper::WorkOrder::HeadMajor;
    if (ordered) {
      const std::string_view tiles =
          choice.kind == Flash3Schedule::Kind::Tile ? flash3::tile_configs().begin()[choice.tile].name : "default";
      flash3::launch_forward_ordered(params, problem.dtype, order, tiles, stream);
    } else if (choice.kind == Flash3Schedule::Kind::Tile) {
      flash3::launch_forward_tile_config(choice.tile, params, problem.dtype, stream);
    } else {
      flash3::launch_forward(params, problem.dtype, stream);
    }
  }
};

}  // namespace

const flash3::TileConfig* Flash3Schedule::tile_config(std::string_view config) {
  for (const flash3::TileConfig& tile : flash3::tile_configs())
    if (tile.name == config) return &tile;
  return nullptr;
}

bool Flash3Schedule::has(std::string_view config, const AttentionProblem& problem) const {
  if (config == "default" || config == "v1") return true;
  if (config == "grid") return with_tile_configs_;
  const flash3::TileConfig* tile = tile_config(config);
  return with_tile_configs_ && tile != nullptr && tile->head_dim == problem.head_dim;
}

// Without a tuned cache entry: m192 at d64. Measured on the H200 (tune --kernels on fa3-grid d64,
// bf16, 2026-12-04, docs/kernels/history/flash3.md "v3"): m192 was 1.08-1.21x as fast as the
// 128-row kernel in every dense case (N 512..16k) and causal N >= 2k; causal N 512 and 1k, where
// it was 0.94-0.95x on a grid, it now runs paired (the plan): on the H100 1.24x and 1.12x the
// 128-row grid (2026-12-07).
// n176 at d128: dense up to N 8k, causal above N 8k. Measured on the H200 (tune --kernels on
// fa3-grid d128, bf16, 2026-12-04 third session): causal, one CTA per work tile, 1.02-1.03x the
// 128-key tiles at 8k and 16k and 1.00x at N <= 4k; dense, persistent, 1.02-1.05x at N 512..8k
// and 0.97x at 16k. The 128-key tiles now run causal problems paired (the plan): on the H100
// (2026-12-07) 1.02x n176's grid at N 8k, 0.96x at 16k. With a 256-key window the paired default
// tiles were 1.19x n176's grid at causal N 16k (0.168 against 0.200 ms, H100, 2026-12-07e), so
// n176 takes causal problems without a left window only.
// n80 at d256: dense from N 1k, causal at N 512 and above N 4k. Measured on the H100 (fa3-grid
// d256, bf16, 2026-12-07e, one run): dense 1.05, 1.06, 1.07, 1.08, 1.14x the default tiles at N
// 1k..16k (0.99x at 512); causal, on a grid, 1.13x the paired default tiles at N 512 and 1.08,
// 1.08x their grid at 8k and 16k, but 0.96-0.98x paired at N 1k-4k.
std::string Flash3Schedule::builtin(const AttentionProblem& problem) const {
  if (has("m192", problem)) return "m192";
  if (has("n176", problem) &&
      (problem.causal ? problem.seq_q > 8192 && problem.window_left < 0 : problem.seq_kv <= 8192))
    return "n176";
  if (has("n80", problem) && (problem.causal ? problem.seq_q <= 512 || problem.seq_q > 4096 : problem.seq_kv >= 1024))
    return "n80";
  return "default";
}

std::vector<std::string> Flash3Schedule::names(const AttentionProblem& problem) const {
  std::vector<std::string> configs{builtin(problem)};
  std::vector<std::string_view> all{"default", "v1", "grid"};
  for (const flash3::TileConfig& tile : flash3::tile_configs()) all.push_back(tile.name);
  for (const std::string_view config : all)
    if (config != configs.front() && has(config, problem)) configs.emplace_back(config);
  return configs;
}

Flash3Schedule::Choice Flash3Schedule::parse(std::string_view config) {
  if (config == "v1") return {Kind::V1};
  if (config == "grid") return {Kind::Grid};
  if (const flash3::TileConfig* tile = tile_config(config))
    return {Kind::Tile, static_cast<std::size_t>(tile - flash3::tile_configs().begin())};
  return {Kind::Default};
}

std::unique_ptr<Backend> make_flash3_backend() { return std::make_unique<Flash3Backend>(); }

}  // namespace attnsuite::cuda
