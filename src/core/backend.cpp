// The parts of the backend interface that every backend shares: the one place a kernel
// configuration is chosen, the support check plan() starts with, and the function-made plan.
#include "attnsuite/backend.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <thread>

#include "attnsuite/error.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "core/host_info.hpp"

namespace attnsuite {

RunReport KernelPlan::backward(const BackwardArgs&, Stream) {
  throw Error(ErrorKind::Unsupported,
              "this plan has no backward (make it with PlanOptions::backward on a backend "
              "whose supports_backward() says yes)");
}

Support Backend::supports_backward(const AttentionProblem&) const {
  return Support::no(fmt::format("{} has no backward pass", name()));
}

// The CPU's model and thread count: a tuned tile size depends on both.
KernelConfigKey Backend::kernel_config_key(const AttentionProblem& problem, const PlanOptions&) const {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  return {host_info().cpu_model, fmt::format("{} threads", threads), std::string(name()), kernel_shape_class(problem)};
}

RunReport Backend::forward(const AttentionProblem& problem, const AttentionArgs& args, Stream stream,
                           const PlanOptions& options) const {
  return plan(problem, options)->forward(args, stream);
}

std::string choose_kernel_config(const Backend& backend, const AttentionProblem& problem, const PlanOptions& options) {
  const std::vector<std::string> configs = backend.kernel_configs(problem);
  const auto has = [&](const std::string& config) { return std::ranges::find(configs, config) != configs.end(); };
  if (!options.kernel_config.empty()) {
    if (configs.empty())
      throw Error(ErrorKind::Usage, fmt::format("{}: kernel config '{}' given, but {} has no kernel configs",
                                                backend.name(), options.kernel_config, backend.name()));
    if (!has(options.kernel_config))
      throw Error(ErrorKind::Usage, fmt::format("{}: kernel config '{}' unknown for this problem; allowed: {}",
                                                backend.name(), options.kernel_config, fmt::join(configs, ", ")));
    return options.kernel_config;
  }
  if (configs.empty()) return {};
  const KernelConfigCache& cache = options.kernel_cache ? *options.kernel_cache : KernelConfigCache::global();
  // No cache file: no key is built (building one may query the GPU).
  if (cache.size() > 0)
    // An unknown cached name (another build's), or one this problem has no kernel for, means the
    // built-in choice.
    if (const auto cached = cache.lookup(backend.kernel_config_key(problem, options)); cached && has(*cached))
      return *cached;
  return configs.front();
}

void require_support(const Backend& backend, const AttentionProblem& problem) {
  const Support support = backend.supports(problem);
  if (!support) throw Error(ErrorKind::Unsupported, fmt::format("{}: {}", backend.name(), support.reason));
}

RunReport FunctionPlan::forward(const AttentionArgs& args, Stream stream) {
  RunReport report;
  report.kernel_config = kernel_config_;
  forward_(args, stream, report);
  return report;
}

RunReport FunctionPlan::backward(const BackwardArgs& args, Stream stream) {
  if (!backward_) return KernelPlan::backward(args, stream);
  RunReport report;
  report.kernel_config = kernel_config_;
  backward_(args, stream, report);
  return report;
}

}  // namespace attnsuite
