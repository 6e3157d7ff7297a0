#include "cpu/common.hpp"

#include <fmt/format.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "attnsuite/error.hpp"
#include "core/cancel.hpp"
#include "core/host_info.hpp"
#include "cpu/isa.hpp"

namespace attnsuite::cpu {

namespace {
constexpr int kMinHeadDim = 32;
constexpr int kMaxHeadDim = 256;
}  // namespace

void check_view(std::string_view backend, const char* what, const TensorView& view,
                const std::array<std::int64_t, 4>& shape, DType dtype, bool contiguous_last_dim) {
  ATTNSUITE_CHECK(!view.empty(), ErrorKind::Usage, fmt::format("{}: {} is missing", backend, what));
  ATTNSUITE_CHECK(view.device.type == DeviceType::Cpu, ErrorKind::Unsupported,
                  fmt::format("{}: {} is on the {}, this backend runs on the CPU", backend, what,
                              to_string(view.device.type)));
  ATTNSUITE_CHECK(
      view.shape == shape, ErrorKind::Usage,
      fmt::format("{}: {} has shape ({}, {}, {}, {}), the problem needs ({}, {}, {}, {})", backend,
                  what, view.shape[0], view.shape[1], view.shape[2], view.shape[3], shape[0],
                  shape[1], shape[2], shape[3]));
  ATTNSUITE_CHECK(view.dtype == dtype, ErrorKind::Usage,
                  fmt::format("{}: {} is {}, the problem is {}", backend, what,
                              to_string(view.dtype), to_string(dtype)));
  ATTNSUITE_CHECK(!contiguous_last_dim || view.strides[3] == 1, ErrorKind::Unsupported,
                  fmt::format("{}: {} has stride {} in its last dim; this backend needs 1", backend,
                              what, view.strides[3]));
}

Support supports_common(const AttentionProblem& problem) {
  try {
    problem.validate();
  } catch (const Error& error) {
    return Support::no(error.what());
  }
  for (int dim : {problem.head_dim, problem.dim_v()}) {
    if (dim < kMinHeadDim || dim > kMaxHeadDim) {
      return Support::no(
          fmt::format("head dim {} not supported; allowed: {}..{}", dim, kMinHeadDim, kMaxHeadDim));
    }
  }
  return Support::yes();
}

void check_args(std::string_view backend, const AttentionProblem& problem,
                const AttentionArgs& args, bool contiguous_last_dim) {
  const std::int64_t b = problem.batch, hq = problem.heads_q, hkv = problem.heads_kv;
  const std::int64_t nq = problem.seq_q, nk = problem.seq_kv;
  const std::int64_t d = problem.head_dim, dv = problem.dim_v();
  check_view(backend, "q", args.q, {b, nq, hq, d}, problem.dtype, contiguous_last_dim);
  check_view(backend, "k", args.k, {b, nk, hkv, d}, problem.dtype, contiguous_last_dim);
  check_view(backend, "v", args.v, {b, nk, hkv, dv}, problem.dtype, contiguous_last_dim);
  check_view(backend, "o", args.o, {b, nq, hq, dv}, problem.dtype, contiguous_last_dim);
  ATTNSUITE_CHECK(args.lse.empty() || args.lse.device.type == DeviceType::Cpu,
                  ErrorKind::Unsupported, fmt::format("{}: lse is not on the CPU", backend));
}

int cpu_threads() {
  const unsigned count = std::thread::hardware_concurrency();
  return count == 0 ? 1 : static_cast<int>(count);
}

KernelConfigKey cpu_kernel_config_key(std::string backend, const AttentionProblem& problem) {
  return {host_info().cpu_model, fmt::format("{} threads, {}", cpu_threads(), to_string(selected_cpu_isa())),
          std::move(backend), kernel_shape_class(problem)};
}

void parallel_for(std::int64_t count, int threads,
                  const std::function<void(std::int64_t item, int thread_index)>& body) {
  if (count <= 0) return;
  const int workers = static_cast<int>(std::min<std::int64_t>(std::max(threads, 1), count));
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  // A cancellable caller (the runner, core/cancel.hpp) makes every item a cancellation point.
  const bool cancellable = cancellable_here();
  auto run = [&](int thread_index) {
    CancellableScope scope(cancellable);
    try {
      for (std::int64_t item = next.fetch_add(1); item < count && !failed.load();
           item = next.fetch_add(1)) {
        throw_if_cancelled();
        body(item, thread_index);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
      failed.store(true);
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (int t = 1; t < workers; ++t) pool.emplace_back(run, t);
  run(0);  // the calling thread is worker 0
  for (auto& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace attnsuite::cpu
