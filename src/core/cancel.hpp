// Cooperative cancellation of long loops. Ctrl-C (or SIGTERM) must end a large case in well
// under a second: the harness used to poll only between timing samples, and one sample of a
// large CPU case, or its fp64 reference, took 12.9 s to notice (issue 27). So the loops that
// can run for seconds — the reference's rows, the CPU kernels' work items (parallel_for), the
// timing loop — poll one process-wide flag that a signal handler sets (the CLI's, the Python
// module's during bench/tune), and throw Error(Cancelled); the runner drops the unfinished case.
//
// Only code inside a CancellableScope stops: the runner opens one around a case, parallel_for
// carries it to its worker threads. Everything else — start-up measurements, attention() called
// from Python, a library user's forward — runs to its end whatever the flag says.
#pragma once

namespace attnsuite {

// Sets the flag. Async-signal-safe (a lock-free atomic store).
void request_cancel() noexcept;
// Clears it (the Python module, after the run that its handler stopped).
void clear_cancel() noexcept;
// Whether the flag is set.
bool cancel_requested() noexcept;

// Marks the current thread as stoppable while it lives (nested scopes keep the outer state).
class CancellableScope {
 public:
  explicit CancellableScope(bool cancellable = true) noexcept;
  ~CancellableScope();
  CancellableScope(const CancellableScope&) = delete;
  CancellableScope& operator=(const CancellableScope&) = delete;

 private:
  bool previous_;
};

// Whether the current thread is inside a CancellableScope.
bool cancellable_here() noexcept;

// Throws Error(ErrorKind::Cancelled) when the flag is set and this thread is cancellable. Costs
// a thread-local read and a relaxed load: cheap enough once per row of the reference.
void throw_if_cancelled();

}  // namespace attnsuite
