#include "cpu/common.hpp"

#include <fmt/format.h>

#include "attnsuite/error.hpp"
#include "core/host_info.hpp"
#include "core/isa.hpp"

namespace attnsuite::cpu {

namespace {
constexpr int kMinHeadDim = 32;
constexpr int kMaxHeadDim = 256;
}  // namespace

ViewShapes view_shapes(const AttentionProblem& problem) {
  const std::int64_t b = problem.batch, hq = problem.heads_q, hkv = problem.heads_kv;
  const std::int64_t nq = problem.seq_q, nk = problem.seq_kv;
  const std::int64_t d = problem.head_dim, dv = problem.dim_v();
  return {{b, nq, hq, d}, {b, nk, hkv, d}, {b, nk, hkv, dv}, {b, nq, hq, dv}};
}

void check_view(std::string_view backend, const char* what, const TensorView& view,
                const std::array<std::int64_t, 4>& shape, DType dtype, bool contiguous_last_dim) {
  ATTNSUITE_CHECK(!view.empty(), ErrorKind::Usage, fmt::format("{}: {} is missing", backend, what));
  ATTNSUITE_CHECK(
      view.device.type == DeviceType::Cpu, ErrorKind::Unsupported,
      fmt::format("{}: {} is on the {}, this backend runs on the CPU", backend, what, to_string(view.device.type)));
  ATTNSUITE_CHECK(
      view.shape == shape, ErrorKind::Usage,
      fmt::format("{}: {} has shape ({}, {}, {}, {}), the problem needs ({}, {}, {}, {})", backend, what, view.shape[0],
                  view.shape[1], view.shape[2], view.shape[3], shape[0], shape[1], shape[2], shape[3]));
  ATTNSUITE_CHECK(
      view.dtype == dtype, ErrorKind::Usage,
      fmt::format("{}: {} is {}, the problem is {}", backend, what, to_string(view.dtype), to_string(dtype)));
  ATTNSUITE_CHECK(
      !contiguous_last_dim || view.strides[3] == 1, ErrorKind::Unsupported,
      fmt::format("{}: {} has stride {} in its last dim; this backend needs 1", backend, what, view.strides[3]));
}

Support supports_common(const AttentionProblem& problem, bool takes_e4m3) {
  try {
    problem.validate();
  } catch (const Error& error) {
    return Support::no(error.what());
  }
  if (problem.dtype == DType::E4M3 && !takes_e4m3)
    return Support::no(
        "dtype e4m3 not supported; allowed: fp32, fp16, bf16 (e4m3 runs on reference, cpu-vanilla "
        "and cpu-flash)");
  for (int dim : {problem.head_dim, problem.dim_v()}) {
    if (dim < kMinHeadDim || dim > kMaxHeadDim) {
      return Support::no(fmt::format("head dim {} not supported; allowed: {}..{}", dim, kMinHeadDim, kMaxHeadDim));
    }
  }
  return Support::yes();
}

Support supports_backward_dtype(const AttentionProblem& problem) {
  if (problem.dtype == DType::E4M3)
    return Support::no(
        "e4m3 has no backward: e4m3 inputs are for inference (the gradients would need a dtype "
        "and scales of their own)");
  return Support::yes();
}

Support CpuBackend::supports_backward(const AttentionProblem& problem) const {
  if (Support dtype = supports_backward_dtype(problem); !dtype) return dtype;
  return supports(problem);
}

std::unique_ptr<KernelPlan> configless_plan(const Backend& backend, const AttentionProblem& problem,
                                            const PlanOptions& options, FunctionPlan::Forward forward,
                                            FunctionPlan::Backward backward) {
  require_support(backend, problem);
  choose_kernel_config(backend, problem, options);  // refuses a config: there is none
  return std::make_unique<FunctionPlan>("", 0, std::move(forward), std::move(backward));
}

void check_args(std::string_view backend, const AttentionProblem& problem, const AttentionArgs& args,
                bool contiguous_last_dim) {
  const ViewShapes shape = view_shapes(problem);
  check_view(backend, "q", args.q, shape.q, problem.dtype, contiguous_last_dim);
  check_view(backend, "k", args.k, shape.k, problem.dtype, contiguous_last_dim);
  check_view(backend, "v", args.v, shape.v, problem.dtype, contiguous_last_dim);
  check_view(backend, "o", args.o, shape.o, problem.output_dtype(), contiguous_last_dim);
  ATTNSUITE_CHECK(args.lse.empty() || args.lse.device.type == DeviceType::Cpu, ErrorKind::Unsupported,
                  fmt::format("{}: lse is not on the CPU", backend));
}

KernelConfigKey cpu_kernel_config_key(std::string backend, const AttentionProblem& problem) {
  return {host_info().cpu_model, fmt::format("{} threads, {}", cpu_threads(), to_string(selected_cpu_isa())),
          std::move(backend), kernel_shape_class(problem)};
}

}  // namespace attnsuite::cpu
