#include "bench/gpu_workers.hpp"

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "attnsuite/error.hpp"
#include "bench/runner.hpp"
#include "core/cuda_device.hpp"

namespace attnsuite::bench {

std::vector<int> parse_gpu_list(const std::string& text) {
#if ATTNSUITE_HAVE_CUDA
  const int count = cuda::cuda_device_count();
  if (count == 0)
    throw Error(ErrorKind::Usage,
                fmt::format("--gpus {}: no CUDA GPU is visible ({}); allowed: a GPU machine, or no --gpus", text,
                            cuda::cuda_unavailable_reason()));
  std::vector<int> gpus;
  if (text == "all") {
    for (int i = 0; i < count; ++i) gpus.push_back(i);
    return gpus;
  }
  std::set<int> seen;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    int index = -1;
    const auto [ptr, error] = std::from_chars(text.data() + begin, text.data() + end, index);
    if (error != std::errc() || ptr != text.data() + end || index < 0)
      throw Error(ErrorKind::Usage, fmt::format("--gpus {}: expected 'all' or GPU indices like 0,1,2", text));
    if (index >= count)
      throw Error(ErrorKind::Usage,
                  fmt::format("--gpus {}: GPU {} does not exist; {} visible (0..{})", text, index, count, count - 1));
    if (!seen.insert(index).second)
      throw Error(ErrorKind::Usage, fmt::format("--gpus {}: GPU {} is listed twice", text, index));
    gpus.push_back(index);
    begin = end + 1;
  }
  return gpus;
#else
  throw Error(ErrorKind::Usage,
              fmt::format("--gpus {}: this attnsuite was built without CUDA; allowed: no --gpus", text));
#endif
}

bool run_on_workers(int workers, const std::vector<IndexedCase>& todo, const std::function<bool(const Case&)>& parallel,
                    const std::function<Worker(int)>& make_worker, const std::function<std::string(int)>& label,
                    Runner& serial, const GpuWorkCallbacks& callbacks) {
  // Groups of consecutive parallel cases that share one input shape; the others wait for the end.
  std::vector<std::vector<IndexedCase>> groups;
  std::vector<IndexedCase> host_cases;
  std::string last_shape;
  for (const IndexedCase& item : todo) {
    if (!parallel(*item.c)) {
      host_cases.push_back(item);
      continue;
    }
    const std::string shape = row_for_case(*item.c, nullptr).shape_key();
    if (groups.empty() || shape != last_shape) groups.emplace_back();
    groups.back().push_back(item);
    last_shape = shape;
  }

  std::mutex lock;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr failure;
  const auto cancelled = [&] { return stop.load() || (callbacks.cancelled && callbacks.cancelled()); };
  const auto worker = [&](int index) {
    try {
      Worker own = make_worker(index);
      while (!cancelled()) {
        const std::size_t g = next.fetch_add(1);
        if (g >= groups.size()) break;
        for (const IndexedCase& item : groups[g]) {
          if (cancelled()) break;
          {
            std::lock_guard guard(lock);
            if (callbacks.on_start) callbacks.on_start(item, index);
          }
          std::optional<ResultRow> row = own.runner->run(*item.c, cancelled);
          if (!row) break;
          std::lock_guard guard(lock);
          if (callbacks.on_row) callbacks.on_row(item, index, std::move(*row));
        }
      }
    } catch (const Error& error) {
      std::lock_guard guard(lock);
      if (!failure)
        failure = std::make_exception_ptr(Error(error.kind(), fmt::format("{}: {}", label(index), error.what())));
      stop.store(true);
    } catch (...) {
      std::lock_guard guard(lock);
      if (!failure) failure = std::current_exception();
      stop.store(true);
    }
  };
  if (!groups.empty()) {
    std::vector<std::jthread> threads;
    for (int w = 0; w < workers; ++w) threads.emplace_back(worker, w);
  }
  if (failure) std::rethrow_exception(failure);
  if (callbacks.cancelled && callbacks.cancelled()) return true;

  for (const IndexedCase& item : host_cases) {
    if (callbacks.cancelled && callbacks.cancelled()) return true;
    if (callbacks.on_start) callbacks.on_start(item, -1);
    std::optional<ResultRow> row = serial.run(*item.c, callbacks.cancelled);
    if (!row) return true;
    if (callbacks.on_row) callbacks.on_row(item, -1, std::move(*row));
  }
  return false;
}

bool run_on_gpus(const SweepSpec& spec, const std::vector<int>& gpus, const std::vector<IndexedCase>& todo,
                 Registry& registry, const GpuWorkCallbacks& callbacks) {
  const auto on_gpu = [&](const Case& c) {
    return registry.contains(c.backend) && registry.find(c.backend).device().type == DeviceType::Cuda;
  };
  const auto make_worker = [&](int w) {
    Worker worker;
    worker.registry = std::make_unique<Registry>();  // backend instances of this thread alone
    register_builtin_backends(*worker.registry);
    worker.runner = std::make_unique<Runner>(spec, *worker.registry);
    worker.runner->use_cuda_device(gpus[static_cast<std::size_t>(w)]);
    return worker;
  };
  const auto label = [&](int w) { return fmt::format("GPU {}", gpus[static_cast<std::size_t>(w)]); };
  Runner serial(spec, registry);
  // The callbacks see GPU indices, not worker numbers.
  GpuWorkCallbacks mapped = callbacks;
  const auto gpu_of = [&](int w) { return w < 0 ? -1 : gpus[static_cast<std::size_t>(w)]; };
  if (callbacks.on_start)
    mapped.on_start = [&](const IndexedCase& item, int w) { callbacks.on_start(item, gpu_of(w)); };
  if (callbacks.on_row)
    mapped.on_row = [&](const IndexedCase& item, int w, ResultRow row) {
      callbacks.on_row(item, gpu_of(w), std::move(row));
    };
  return run_on_workers(static_cast<int>(gpus.size()), todo, on_gpu, make_worker, label, serial, mapped);
}

}  // namespace attnsuite::bench
