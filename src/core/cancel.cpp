#include "core/cancel.hpp"

#include <atomic>

#include "attnsuite/error.hpp"

namespace attnsuite {

namespace {
std::atomic<bool> g_cancel{false};
static_assert(std::atomic<bool>::is_always_lock_free, "request_cancel() is called from signal handlers");
thread_local bool t_cancellable = false;
}  // namespace

void request_cancel() noexcept { g_cancel.store(true, std::memory_order_relaxed); }
void clear_cancel() noexcept { g_cancel.store(false, std::memory_order_relaxed); }
bool cancel_requested() noexcept { return g_cancel.load(std::memory_order_relaxed); }

CancellableScope::CancellableScope(bool cancellable) noexcept : previous_(t_cancellable) {
  t_cancellable = t_cancellable || cancellable;
}
CancellableScope::~CancellableScope() { t_cancellable = previous_; }

bool cancellable_here() noexcept { return t_cancellable; }

void throw_if_cancelled() {
  if (t_cancellable && g_cancel.load(std::memory_order_relaxed))
    throw Error(ErrorKind::Cancelled, "cancelled (interrupted)");
}

}  // namespace attnsuite
