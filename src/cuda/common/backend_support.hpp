// Rules and argument checks that every attnsuite CUDA backend shares.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "attnsuite/backend.hpp"

namespace attnsuite::cuda {

// The problem-only rules (testable without a GPU): a valid problem in fp16 or bf16.
Support supports_problem_common(std::string_view backend, const AttentionProblem& problem);
// The shape rules of the fused kernels: the head dim one of `head_dims` (the refusal lists them),
// head_dim_v equal to it, and batch and q heads at most 65535 each (grid dimensions y and z).
Support supports_shape(std::string_view backend, const AttentionProblem& problem, std::span<const int> head_dims);
// The backward's head dim rule: "head dim <d> has no <family> backward; allowed: <head_dims,
// comma-separated> (<why>)" unless the head dim is one of `head_dims`.
Support supports_backward_head_dim(std::string_view family, const AttentionProblem& problem,
                                   std::span<const int> head_dims, std::string_view why);

// The device rule: a CUDA device is current and has compute capability >= 8.0 (mma.sync with
// bf16, cp.async). "no CUDA device available: ..." without one.
Support supports_device(std::string_view backend);

// The current device's compute capability as 10 · major + minor (90 for sm_90), or nullopt when
// it cannot be queried (no device, no driver; the CUDA error is cleared).
std::optional<int> current_compute_capability();

// forward()'s checks: the views match the problem (shapes, dtypes, CUDA device, O in problem.output_dtype(), LSE
// on the device when given) and each has a contiguous last dim. Throws Error(Usage) for a
// mismatch, Error(Unsupported) for a non-contiguous last dim.
void check_cuda_args(std::string_view backend, const AttentionProblem& problem, const AttentionArgs& args);

// backward()'s checks: Q, K, V, O, dO, dQ, dK, dV match the problem (dq like q, dk like k, dv
// like v, d_o like o), on a CUDA device, each with a contiguous last dim, and the LSE present
// on the device. Throws Error(Usage) for a mismatch or a missing LSE, Error(Unsupported) for a
// non-contiguous last dim.
void check_cuda_backward_args(std::string_view backend, const AttentionProblem& problem, const BackwardArgs& args);
// The backward's workspace is there: Error(Usage) "<backend>: the backward needs its workspace (N
// bytes, the plan's backward_workspace_bytes()); BackwardArgs::workspace is null" otherwise.
void require_backward_workspace(std::string_view backend, const BackwardArgs& args, std::size_t bytes);

// Which of `allowed` backend option `key` names: its index, 0 (the first, the default) when absent;
// another value is Error(Usage) "<backend>: backend option <key>='<value>' not allowed; allowed:
// <allowed, comma-separated>".
std::size_t option_choice(std::string_view backend, const std::map<std::string, std::string>& options,
                          std::string_view key, std::span<const std::string_view> allowed);

// The backend option of a backward that plans refuse unless opted in (flash2's):
// "1" opts in, "0" or absent not; another value is Error(Usage) "<backend>: backend option
// experimental_backward='<value>' not allowed; allowed: 0, 1".
inline constexpr std::string_view kExperimentalBackwardOption = "experimental_backward";
bool experimental_backward_opted_in(std::string_view backend, const std::map<std::string, std::string>& options);

}  // namespace attnsuite::cuda
