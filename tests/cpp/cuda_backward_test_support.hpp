// Test support for our CUDA backends' backward tests (test_cuda_flash2_backward.cpp,
// test_cuda_flash3_backward.cpp): the plan options they take, one gradient check of a backward on
// the GPU against the fp64 reference (backward_test_support.hpp), and the training issue's
// gradient cases that both kernels run.
#pragma once

#if ATTNSUITE_HAVE_CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "backward_test_support.hpp"
#include "cuda/common/backward_workspace.hpp"
#include "cuda/cuda_backends.hpp"
#include "gpu_test_support.hpp"

namespace attnsuite::testing_support {

// Backend options of a backward test (flash3's backward_epilogue), none when empty.
using BackendOptions = std::map<std::string, std::string>;

// opt_in, key_tile: flash2's options; `extra`: more backend options.
inline PlanOptions backward_options(bool deterministic, bool opt_in = true, int key_tile = 64,
                                    const BackendOptions& extra = {}) {
  PlanOptions options;
  options.backward = true;
  options.deterministic = deterministic;
  if (opt_in) options.options["experimental_backward"] = "1";
  if (key_tile != 64) options.options["backward_key_tile"] = std::to_string(key_tile);
  for (const auto& [key, value] : extra) options.options[key] = value;
  return options;
}

inline AttentionProblem windowed(AttentionProblem p, int window_left, int window_right) {
  p.window_left = window_left;
  p.window_right = window_right;
  return p;
}

// Runs a backward (flash2's opted in) on fresh random inputs and dO, checks every gradient against
// the fp64 reference with FlashAttention's rule and dQ = 0 exactly in rows that see no key.
// `backend`: flash2 (both dQ modes, both key tiles) or flash3 (its options in `extra`).
inline void check_gpu_backward(const std::string& backend_name, const AttentionProblem& p, bool deterministic,
                               int key_tile = 64, const BackendOptions& extra = {}) {
  const std::uint64_t seed = std::random_device{}();
  std::string options_text;
  for (const auto& [key, value] : extra) options_text += key + "=" + value + " ";
  SCOPED_TRACE(backend_name + " backward " + (deterministic ? "deterministic " : "") + options_text + "key tile " +
               std::to_string(key_tile) + " " + p.describe() + " " + std::string(to_string(p.layout)) + " window " +
               std::to_string(p.window_left) + "," + std::to_string(p.window_right) + " seed " + std::to_string(seed));
  const Backend& backend = Registry::global().find(backend_name);
  ASSERT_TRUE(backend.supports(p)) << backend.supports(p).reason;
  ASSERT_TRUE(backend.supports_backward(p)) << backend.supports_backward(p).reason;
  const std::unique_ptr<KernelPlan> plan =
      backend.plan(p, backward_options(deterministic, /*opt_in=*/backend_name == "flash2", key_tile, extra));
  EXPECT_EQ(plan->backward_workspace_bytes(), cuda::backward_workspace_bytes(p, deterministic));

  const Inputs in = random_inputs(p, seed);
  const HostTensor d_o = random_output_gradient(p, seed + 2);
  auto context = cuda::make_cuda_context(0);
  const BackwardRuns runs = run_backward_on_device(context.get(), *plan, p, in, d_o);
  const GradientErrors errors = expect_gradients_match_reference(p, in, d_o, runs);
  std::printf("  %s%s %-58s w%d,%d %s dQ %.3g dK %.3g dV %.3g max err\n", backend_name.c_str(),
              deterministic ? " det" : "    ", p.describe().c_str(), p.window_left, p.window_right,
              std::string(to_string(p.layout)).c_str(), errors.dq, errors.dk, errors.dv);
}

// The cases of the CPU backward's accuracy tests that the GPU backwards support (head dims 64, 128,
// head_dim_v equal), in both dtypes; "peaked": scale 1, scores with std 8, P far from uniform.
inline std::vector<AttentionProblem> training_gradient_cases() {
  AttentionProblem peaked = make_problem(1, 2, 2, 200, 300, 64, DType::F16, Layout::BSHD, false);
  peaked.scale = 1.0f;
  return {
      make_problem(1, 2, 2, 1, 1, 64, DType::F16, Layout::BSHD, false),
      make_problem(2, 2, 2, 7, 7, 64, DType::F16, Layout::BSHD, false),
      make_problem(2, 3, 3, 33, 33, 64, DType::F16, Layout::BSHD, false),
      make_problem(1, 1, 1, 1000, 1000, 64, DType::F16, Layout::BSHD, false),
      make_problem(1, 2, 1, 1000, 1000, 64, DType::F16, Layout::BSHD, true),
      make_problem(1, 2, 2, 33, 200, 64, DType::F16, Layout::BSHD, true),
      make_problem(1, 2, 2, 200, 33, 64, DType::F16, Layout::BSHD, true),
      make_problem(2, 2, 2, 1, 300, 128, DType::F16, Layout::BSHD, true),
      make_problem(1, 8, 2, 65, 130, 64, DType::F16, Layout::BSHD, true),
      make_problem(2, 4, 1, 50, 97, 64, DType::F16, Layout::BSHD, false),
      windowed(make_problem(1, 2, 2, 300, 300, 64, DType::F16, Layout::BSHD, true), 40, 0),
      windowed(make_problem(1, 2, 2, 250, 260, 64, DType::F16, Layout::BSHD, false), 17, 9),
      windowed(make_problem(1, 2, 2, 150, 40, 64, DType::F16, Layout::BSHD, true), 5, 0),
      windowed(make_problem(1, 2, 2, 120, 50, 64, DType::F16, Layout::BSHD, false), -1, 3),
      peaked,
  };
}

}  // namespace attnsuite::testing_support

#endif  // ATTNSUITE_HAVE_CUDA
