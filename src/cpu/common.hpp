// Helpers shared by the three CPU backends: argument checks, the supports() rules they have in
// common, and a tiny work-stealing parallel loop over std::thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "attnsuite/backend.hpp"
#include "attnsuite/kernel_configs.hpp"

namespace attnsuite::cpu {

// The rules every CPU backend shares: a valid problem and head dims 32..256 (for Q/K and V).
// Returns ok or the first reason it cannot run.
Support supports_common(const AttentionProblem& problem);

// Checks one view: present, on the CPU, of the given shape and dtype and, when
// contiguous_last_dim, with stride 1 in its last dim. Throws Error naming `what`.
void check_view(std::string_view backend, const char* what, const TensorView& view,
                const std::array<std::int64_t, 4>& shape, DType dtype, bool contiguous_last_dim);

// Checks that args match the problem (shapes, dtypes, CPU device, O and Q the same dtype) and,
// when contiguous_last_dim, that every view has stride 1 in its last dim. Throws Error.
void check_args(std::string_view backend, const AttentionProblem& problem,
                const AttentionArgs& args, bool contiguous_last_dim);

// Threads used by the CPU backends: std::thread::hardware_concurrency(), at least 1.
int cpu_threads();
// The kernel-config cache key of a CPU backend: the CPU model, the thread count and the vector
// ISA the kernels run (as "N threads, avx512" in the driver field: a tile size tuned for one
// ISA says little about the other), the backend and the problem's shape class.
KernelConfigKey cpu_kernel_config_key(std::string backend, const AttentionProblem& problem);

// Runs body(item, thread_index) for item in [0, count) on min(threads, count) std::threads that
// take items from a shared counter (so uneven items, e.g. causal blocks, balance). Which thread
// runs an item never changes what the item computes. The first exception thrown by a body is
// rethrown here once all threads have stopped. Called inside a CancellableScope, each item is a
// cancellation point (core/cancel.hpp): a cancel request ends the loop with Error(Cancelled).
void parallel_for(std::int64_t count, int threads,
                  const std::function<void(std::int64_t item, int thread_index)>& body);

std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_vanilla_backend();
std::unique_ptr<Backend> make_flash_backend();

}  // namespace attnsuite::cpu
