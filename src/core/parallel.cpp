#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cancel.hpp"

namespace attnsuite::cpu {

int cpu_threads() {
  const unsigned count = std::thread::hardware_concurrency();
  return count == 0 ? 1 : static_cast<int>(count);
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
      for (std::int64_t item = next.fetch_add(1); item < count && !failed.load(); item = next.fetch_add(1)) {
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
