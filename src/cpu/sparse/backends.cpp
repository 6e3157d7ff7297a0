// `cpu-sparge` (the predictor, then the block-skipping forward) and `cpu-block-sparse` (a
// user-given block mask): the CPU path of the sparse backends, so that CI runs the whole chain
// — options, config files, predictor, skipping, result rows — without a GPU.
#include <fmt/format.h>

#include <chrono>

#include "attnsuite/error.hpp"
#include "cpu/common.hpp"
#include "cpu/sparse/sparse_backends.hpp"
#include "sparse/options.hpp"
#include "sparse/sparse.hpp"

namespace attnsuite::sparse {

namespace {

BackendIdentity identity(bool predicted) {
  if (predicted) {
    return {"cpu-sparge",
            "cpu-sparge (predicted block-sparse attention on the CPU)",
            {DeviceType::Cpu, 0},
            "fp32/fp16/bf16, head dim 64/128/256, causal, window, GQA; --sparse-config FILE"};
  }
  return {"cpu-block-sparse",
          "cpu-block-sparse (block-sparse attention with a given mask, CPU)",
          {DeviceType::Cpu, 0},
          "fp32/fp16/bf16, head dim 64/128/256, causal, window, GQA; --block-mask SPEC"};
}

class CpuSparseBackend final : public IdentifiedBackend {
 public:
  explicit CpuSparseBackend(bool predicted) : IdentifiedBackend(identity(predicted)), predicted_(predicted) {}

  std::vector<std::string> option_keys() const override { return SparseOptions::keys(predicted_); }
  void check_options(const std::map<std::string, std::string>& options) const override {
    (void)SparseOptions::parse(options, predicted_);
  }
  Support supports(const AttentionProblem& problem) const override {
    Support support = cpu::supports_common(problem);
    if (!support) return support;
    if (problem.head_dim != 64 && problem.head_dim != 128 && problem.head_dim != 256)
      return Support::no(
          fmt::format("head dim {} not supported by {}; allowed: 64, 128, 256", problem.head_dim, name()));
    return support;
  }
  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& plan_options) const override {
    require_support(*this, problem);
    choose_kernel_config(*this, problem, plan_options);  // refuses a config: there is none
    SparseOptions options = SparseOptions::parse(plan_options.options, predicted_);
    if (const Support support = options.supports(problem, predicted_); !support)
      throw Error(ErrorKind::Unsupported, fmt::format("{}: {}", name(), support.reason));
    return std::make_unique<FunctionPlan>(
        "", 0, [this, problem, options = std::move(options)](const AttentionArgs& args, Stream, RunReport& report) {
          run(problem, options, args, report);
        });
  }

 private:
  void run(const AttentionProblem& problem, const SparseOptions& options, const AttentionArgs& args,
           RunReport& report) const {
    cpu::check_args(name(), problem, args, false);
    const BlockShape shape = block_shape_for(problem.head_dim);
    SparseStats stats;
    BlockMask mask;
    if (predicted_) {
      const auto start = std::chrono::steady_clock::now();
      mask = predict_blocks(problem, args, shape, options.config);
      stats.predictor_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    } else {
      mask = make_block_mask(options.mask_spec, problem, shape);
    }
    sparse_forward(problem, args, shape, mask, options.config, &stats);
    report.sparse = RunReport::Sparse{stats.predicted_sparsity(), stats.achieved_sparsity(),
                                      predicted_ ? std::optional<double>(stats.predictor_ms) : std::nullopt};
  }

  bool predicted_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_sparge_backend() { return std::make_unique<CpuSparseBackend>(true); }
std::unique_ptr<Backend> make_cpu_block_sparse_backend() { return std::make_unique<CpuSparseBackend>(false); }

}  // namespace attnsuite::sparse
