#include "cuda/common/backend_support.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "attnsuite/error.hpp"
#include "cuda/cuda_backends.hpp"

namespace attnsuite::cuda {

Support supports_problem_common(std::string_view backend, const AttentionProblem& problem) {
  try {
    problem.validate();
  } catch (const Error& error) {
    return Support::no(error.what());
  }
  if (problem.dtype != DType::F16 && problem.dtype != DType::BF16) {
    return Support::no(
        fmt::format("dtype {} not supported by {}; allowed: fp16, bf16", to_string(problem.dtype), backend));
  }
  return Support::yes();
}

Support supports_shape(std::string_view backend, const AttentionProblem& problem, std::span<const int> head_dims) {
  if (std::find(head_dims.begin(), head_dims.end(), problem.head_dim) == head_dims.end()) {
    return Support::no(fmt::format("head dim {} not supported by {}; allowed: {}", problem.head_dim, backend,
                                   fmt::join(head_dims, ", ")));
  }
  if (problem.dim_v() != problem.head_dim) {
    return Support::no(fmt::format("head_dim_v {} != head_dim {} not supported by {}; needs equal head dims",
                                   problem.dim_v(), problem.head_dim, backend));
  }
  if (problem.heads_q > 65535 || problem.batch > 65535) {
    return Support::no(fmt::format("batch {} × heads {} not supported by {}; at most 65535 each", problem.batch,
                                   problem.heads_q, backend));
  }
  return Support::yes();
}

Support supports_backward_head_dim(std::string_view family, const AttentionProblem& problem,
                                   std::span<const int> head_dims, std::string_view why) {
  if (std::ranges::find(head_dims, problem.head_dim) == head_dims.end()) {
    return Support::no(fmt::format("head dim {} has no {} backward; allowed: {} ({})", problem.head_dim, family,
                                   fmt::join(head_dims, ", "), why));
  }
  return Support::yes();
}

Support supports_device(std::string_view backend) {
  const std::string reason = cuda_unavailable_reason();
  if (!reason.empty()) return Support::no("no CUDA device available: " + reason);
  const std::optional<int> capability = current_compute_capability();
  if (!capability) return Support::no("no CUDA device available: could not query the current device");
  if (*capability < 80) {
    return Support::no(fmt::format("compute capability {}.{} not supported by {}; needs 8.0 or newer", *capability / 10,
                                   *capability % 10, backend));
  }
  return Support::yes();
}

std::optional<int> current_compute_capability() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return 10 * major + minor;
}

namespace {

void check_view(std::string_view backend, const char* what, const TensorView& view,
                const std::array<std::int64_t, 4>& shape, DType dtype) {
  ATTNSUITE_REQUIRE(!view.empty(), fmt::format("{}: {} is missing", backend, what));
  ATTNSUITE_REQUIRE(view.device.type == DeviceType::Cuda, fmt::format("{}: {} is on the {}, needs a CUDA device",
                                                                      backend, what, to_string(view.device.type)));
  ATTNSUITE_REQUIRE(
      view.shape == shape,
      fmt::format("{}: {} has shape ({}, {}, {}, {}), the problem needs ({}, {}, {}, {})", backend, what, view.shape[0],
                  view.shape[1], view.shape[2], view.shape[3], shape[0], shape[1], shape[2], shape[3]));
  ATTNSUITE_REQUIRE(view.dtype == dtype, fmt::format("{}: {} is {}, the problem is {}", backend, what,
                                                     to_string(view.dtype), to_string(dtype)));
  if (view.strides[3] != 1) {
    throw Error(ErrorKind::Unsupported, fmt::format("{}: {} has last-dim stride {}; {} needs a contiguous last dim",
                                                    backend, what, view.strides[3], backend));
  }
}

}  // namespace

void check_cuda_args(std::string_view backend, const AttentionProblem& problem, const AttentionArgs& args) {
  const std::int64_t b = problem.batch, hq = problem.heads_q, hkv = problem.heads_kv;
  check_view(backend, "q", args.q, {b, problem.seq_q, hq, problem.head_dim}, problem.dtype);
  check_view(backend, "k", args.k, {b, problem.seq_kv, hkv, problem.head_dim}, problem.dtype);
  check_view(backend, "v", args.v, {b, problem.seq_kv, hkv, problem.dim_v()}, problem.dtype);
  check_view(backend, "o", args.o, {b, problem.seq_q, hq, problem.dim_v()}, problem.output_dtype());
  ATTNSUITE_REQUIRE(args.lse.empty() || args.lse.device.type == DeviceType::Cuda,
                    fmt::format("{}: lse is on the {}, needs a CUDA device", backend, to_string(args.lse.device.type)));
}

void check_cuda_backward_args(std::string_view backend, const AttentionProblem& problem, const BackwardArgs& args) {
  const std::int64_t b = problem.batch, hq = problem.heads_q, hkv = problem.heads_kv;
  const std::int64_t nq = problem.seq_q, nk = problem.seq_kv, d = problem.head_dim, dv = problem.dim_v();
  check_view(backend, "q", args.q, {b, nq, hq, d}, problem.dtype);
  check_view(backend, "k", args.k, {b, nk, hkv, d}, problem.dtype);
  check_view(backend, "v", args.v, {b, nk, hkv, dv}, problem.dtype);
  check_view(backend, "o", args.o, {b, nq, hq, dv}, problem.dtype);
  check_view(backend, "d_o", args.d_o, {b, nq, hq, dv}, problem.dtype);
  check_view(backend, "dq", args.dq, {b, nq, hq, d}, problem.dtype);
  check_view(backend, "dk", args.dk, {b, nk, hkv, d}, problem.dtype);
  check_view(backend, "dv", args.dv, {b, nk, hkv, dv}, problem.dtype);
  ATTNSUITE_REQUIRE(!args.lse.empty(),
                    fmt::format("{}: lse is missing; the backward needs the forward's log-sum-exp", backend));
  ATTNSUITE_REQUIRE(args.lse.device.type == DeviceType::Cuda,
                    fmt::format("{}: lse is on the {}, needs a CUDA device", backend, to_string(args.lse.device.type)));
}

void require_backward_workspace(std::string_view backend, const BackwardArgs& args, std::size_t bytes) {
  ATTNSUITE_REQUIRE(args.workspace != nullptr,
                    fmt::format("{}: the backward needs its workspace ({} bytes, the plan's "
                                "backward_workspace_bytes()); BackwardArgs::workspace is null",
                                backend, bytes));
}

std::size_t option_choice(std::string_view backend, const std::map<std::string, std::string>& options,
                          std::string_view key, std::span<const std::string_view> allowed) {
  const auto found = options.find(std::string(key));
  if (found == options.end()) return 0;
  for (std::size_t i = 0; i < allowed.size(); ++i)
    if (found->second == allowed[i]) return i;
  throw Error(ErrorKind::Usage, fmt::format("{}: backend option {}='{}' not allowed; allowed: {}", backend, key,
                                            found->second, fmt::join(allowed, ", ")));
}

bool experimental_backward_opted_in(std::string_view backend, const std::map<std::string, std::string>& options) {
  static constexpr std::string_view kAllowed[] = {"0", "1"};
  return option_choice(backend, options, kExperimentalBackwardOption, kAllowed) == 1;
}

}  // namespace attnsuite::cuda
