// `flash3-fp8`: flash3 with e4m3 Q, K, V (fp8_kernel.cuh), as a Backend, for two input dtypes:
// - bf16: the backend quantizes Q, K, V per tensor to e4m3 in a pre-pass (fp8_launch.cu) whose
//   time is part of every forward;
// - e4m3: e4m3 Q, K, V with their per-tensor descales go
//   straight to the same kernel (fp8_e4m3_launch.cu), no pre-pass.
// Both write bf16 O and the LSE. Rows tell the two apart by their dtype column.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "attnsuite/error.hpp"
#include "cuda/common/attention_params.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/flash3/flash3.hpp"
#include "cuda/flash3/fp8_launch.hpp"
#include "cuda/flash3/tensor_map.hpp"

namespace attnsuite::cuda {
namespace {

flash3::Params make_params(const AttentionProblem& problem, const AttentionArgs& args) {
  flash3::Params params;
  fill_attention_params(params, problem, args);
  return params;
}

class Flash3Fp8Backend final : public Flash3FamilyBackend {
 public:
  Flash3Fp8Backend()
      : Flash3FamilyBackend(
            {"flash3-fp8",
             "flash3-fp8 (flash3 with e4m3 Q/K/V: bf16 in with a per-tensor e4m3 quantization pre-pass timed, or "
             "e4m3 in; bf16 out)",
             {DeviceType::Cuda, 0},
             "bf16 in (quantized to e4m3 per tensor inside forward, pre-pass timed) or e4m3 in with per-tensor "
             "descales, bf16 out, head dim 64/128, causal, sliding window, "
             "GQA/MQA, seq_q != seq_kv, BSHD/BHSD (16-byte aligned strides), LSE; sm_90 only; option "
             "forward_order=grid|persistent (persistent: causal problems in paired units, unmasked ones "
             "head-major, both on min(works, SMs) CTAs; default: persistent at N <= 2048 unmasked and N <= "
             "4096 causal, the grid elsewhere; kernel config v1 on the grid only)"},
            /*with_tile_configs=*/false) {}

  Support supports(const AttentionProblem& problem) const override {
    if (problem.dtype != DType::BF16 && problem.dtype != DType::E4M3) {
      return Support::no(
          fmt::format("dtype {} not supported by flash3-fp8; allowed: bf16 (quantized to e4m3 by the "
                      "backend), e4m3",
                      to_string(problem.dtype)));
    }
    // The common rules (a valid problem) in bf16's terms: they refuse every dtype but fp16/bf16.
    AttentionProblem as_bf16 = problem;
    as_bf16.dtype = DType::BF16;
    const Support support = supports_problem_common(name(), as_bf16);
    if (!support) return support;
    return supports_kernel(problem, flash3::kFp8HeadDims);
  }

  // forward_order: "grid" (one CTA per 128-row query tile) or "persistent" (persistent_order);
  // absent: builtin_persistent. Persistent runs the default schedule only: with kernel config v1
  // it has not run on a GPU, so v1 stays on the grid.
  std::vector<std::string> option_keys() const override { return {std::string(kForwardOrder)}; }
  void check_options(const std::map<std::string, std::string>& options) const override { (void)forward_order(options); }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    const std::optional<bool> asked = forward_order(options.options);  // true: persistent
    require_support(*this, problem);
    std::string config = choose_kernel_config(*this, problem, options);
    const bool serial = Flash3Schedule::parse(config).kind == Flash3Schedule::Kind::V1;
    if (serial && asked.value_or(false))
      throw Error(ErrorKind::Unsupported,
                  "flash3-fp8: forward_order=persistent runs kernel config default only; v1 runs on the grid");
    const bool persistent = !serial && (asked ? *asked : builtin_persistent(problem));
    const flash3::Fp8Order order = persistent ? persistent_order(problem) : flash3::Fp8Order::Grid;
    const std::size_t workspace =
        problem.dtype == DType::E4M3 ? flash3::kFp8E4m3WorkspaceBytes : workspace_bytes(problem);
    const bool looping = looping_ctas(problem, order);
    auto plan = std::make_unique<FunctionPlan>(
        std::move(config), workspace,
        [this, problem, serial, order, looping, workspace](const AttentionArgs& args, Stream stream, RunReport&) {
          run(problem, args, serial, order, looping, workspace, stream);
        });
    plan->set_work_order(std::string(work_order_name(order, looping)));
    return plan;
  }

 private:
  static constexpr std::string_view kForwardOrder = "forward_order";
  // Whether forward_order asks for persistent (true) or the grid (false); nullopt when absent.
  static std::optional<bool> forward_order(const std::map<std::string, std::string>& options) {
    static constexpr std::string_view kOrders[] = {"grid", "persistent"};
    if (!options.contains(std::string(kForwardOrder))) return std::nullopt;
    return cuda::option_choice("flash3-fp8", options, kForwardOrder, kOrders) == 1;
  }
  // flash3's schedules: problems whose right bound is the diagonal (causal) in paired units, the
  // others head-major (hopper/scheduler.cuh).
  static flash3::Fp8Order persistent_order(const AttentionProblem& problem) {
    return problem.right_bound() == 0 ? flash3::Fp8Order::Paired : flash3::Fp8Order::HeadMajor;
  }
  // Params::persistent: min(works, SMs) CTAs that loop over the works, for paired units and
  // unmasked problems; one CTA per work on other masks, where a static round-robin leaves long
  // works unbalanced (flash3's measurement, hopper/scheduler.cuh). Paired units on at most one CTA
  // per SM (as flash3's) against one CTA a unit, H100, e4m3 in, causal, B·N = 16384, one call
  // (docs/results/h100/2026-12-07g/, fa3-fp8-e4m3-{pc,pe}-call1): 1.19, 1.14, 1.06, 1.03, 1.01x
  // at d128 N 1k, 2k, 4k, 8k, 16k (d64 1.11, 1.06, 1.02, 1.02, 0.99x).
  static bool looping_ctas(const AttentionProblem& problem, flash3::Fp8Order order) {
    return order == flash3::Fp8Order::Paired || (order == flash3::Fp8Order::HeadMajor && !problem.has_mask());
  }
  // The plan's work_order (result rows' column): "grid", "paired", "persistent" (head-major on
  // looping CTAs) or "head-major" (the persistent kernel, one CTA per work).
  static std::string_view work_order_name(flash3::Fp8Order order, bool looping) {
    if (order == flash3::Fp8Order::Grid) return "grid";
    if (order == flash3::Fp8Order::Paired) return "paired";
    return looping ? "persistent" : "head-major";
  }
  // Persistent where it measured faster: short works, whose prologue and epilogue the persistent
  // CTAs overlap with the next work's loads. H100, e4m3 in, B·N = 16384, one run each: unmasked
  // (docs/results/h100/2026-12-07f/, fa3-fp8-e4m3-{g,pe}-call1), grid time / persistent time,
  // d128 1.13, 1.03, 0.99, 0.98, 0.96 at N 1k, 2k, 4k, 8k, 16k (d64 1.07, 1.02, 0.99, 0.96, 0.96);
  // causal, paired on looping CTAs (2026-12-07g, fa3-fp8-e4m3-{g,pc}-call1), d128 1.12, 1.05,
  // 1.00, 0.95 at N 2k, 4k, 8k, 16k (d64 1.07, 1.03, 1.01, 0.96). So: unmasked problems with
  // seq_kv <= 2048 and causal ones with seq_q <= 4096; the grid elsewhere (and on other masks).
  static bool builtin_persistent(const AttentionProblem& problem) {
    return problem.has_mask() ? problem.causal && problem.seq_q <= 4096 : problem.seq_kv <= 2048;
  }

  static std::size_t workspace_bytes(const AttentionProblem& problem) {
    flash3::Params params;
    params.batch = problem.batch;
    params.heads_q = problem.heads_q;
    params.heads_kv = problem.heads_kv;
    params.seq_q = problem.seq_q;
    params.seq_kv = problem.seq_kv;
    params.head_dim = problem.head_dim;
    return flash3::fp8_workspace_bytes(params);
  }

  void run(const AttentionProblem& problem, const AttentionArgs& args, bool serial, flash3::Fp8Order order,
           bool looping, std::size_t workspace, Stream stream) const {
    check_cuda_args(name(), problem, args);
    // The pre-pass reads Q, K, V in 16-byte pieces and the no-key path writes O so: the same
    // base/stride rule as flash3's TMA reads. e4m3 Q, K, V are read by TMA directly: 16-byte
    // aligned strides of 1-byte elements.
    const bool e4m3 = problem.dtype == DType::E4M3;
    check_16_byte_layout(args, "read in 16-byte pieces", e4m3 ? 1 : 2);
    if (args.workspace == nullptr) {
      throw Error(
          ErrorKind::Usage,
          fmt::format("flash3-fp8: needs a workspace of {} bytes (the plan's workspace_bytes()), got none", workspace));
    }
    flash3::Params params = make_params(problem, args);
    params.serial_schedule = serial;
    params.persistent = looping;
    if (e4m3) {
      const float descales[3] = {args.q.descale, args.k.descale, args.v.descale};
      flash3::launch_forward_fp8_e4m3(params, descales, args.workspace, order, stream);
      return;
    }
    flash3::launch_forward_fp8(params, args.workspace, order, stream);
  }
};

}  // namespace

std::unique_ptr<Backend> make_flash3_fp8_backend() { return std::make_unique<Flash3Fp8Backend>(); }

}  // namespace attnsuite::cuda
