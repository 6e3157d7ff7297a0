// Helpers shared by the CPU backends: argument checks, the supports() rules they have in common,
// the kernel-config key; the host's threads (core/parallel.hpp) come with it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "attnsuite/backend.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "core/parallel.hpp"

namespace attnsuite::cpu {

// The rules every CPU backend shares: a valid problem, head dims 32..256 (for Q/K and V) and,
// unless takes_e4m3, a dtype other than e4m3. Returns ok or the first reason it cannot run.
Support supports_common(const AttentionProblem& problem, bool takes_e4m3 = false);

// No for an e4m3 problem (e4m3 has no backward), else yes: what supports_backward() asks first.
Support supports_backward_dtype(const AttentionProblem& problem);

// A CPU backend: on the host (device cpu:0); its backward takes what its forward takes, e4m3
// aside (it has none).
class CpuBackend : public IdentifiedBackend {
 public:
  CpuBackend(std::string name, std::string display_name, std::string capabilities)
      : IdentifiedBackend({std::move(name), std::move(display_name), {DeviceType::Cpu, 0}, std::move(capabilities)}) {}
  Support supports_backward(const AttentionProblem& problem) const override;
};

// The plan of a backend without kernel configs (reference, cpu-vanilla): require_support, a
// named config refused (listing that there is none), forward and backward as given.
std::unique_ptr<KernelPlan> configless_plan(const Backend& backend, const AttentionProblem& problem,
                                            const PlanOptions& options, FunctionPlan::Forward forward,
                                            FunctionPlan::Backward backward);

// The (batch, seq, heads, dim) shape each view of a problem must have; dQ, dK, dV are shaped
// like Q, K, V and dO like O.
struct ViewShapes {
  std::array<std::int64_t, 4> q, k, v, o;
};
ViewShapes view_shapes(const AttentionProblem& problem);

// Checks one view: present, on the CPU, of the given shape and dtype and, when
// contiguous_last_dim, with stride 1 in its last dim. Throws Error naming `what`.
void check_view(std::string_view backend, const char* what, const TensorView& view,
                const std::array<std::int64_t, 4>& shape, DType dtype, bool contiguous_last_dim);

// Checks that args match the problem (shapes, dtypes, CPU device, O in problem.output_dtype()) and,
// when contiguous_last_dim, that every view has stride 1 in its last dim. Throws Error.
void check_args(std::string_view backend, const AttentionProblem& problem, const AttentionArgs& args,
                bool contiguous_last_dim);

// The kernel-config cache key of a CPU backend: the CPU model, the thread count and the vector
// ISA the kernels run (as "N threads, avx512" in the driver field: a tile size tuned for one
// ISA says little about the other), the backend and the problem's shape class.
KernelConfigKey cpu_kernel_config_key(std::string backend, const AttentionProblem& problem);

std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_vanilla_backend();
std::unique_ptr<Backend> make_flash_backend();

}  // namespace attnsuite::cpu
