// The host's threads: how many the CPU code uses and a work-stealing parallel loop over
// std::thread. The CPU backends, the reference checks, the input generators, the sparse
// predictor and the peak probes share them.
#pragma once

#include <cstdint>
#include <functional>

namespace attnsuite::cpu {

// Threads used by the CPU backends: std::thread::hardware_concurrency(), at least 1.
int cpu_threads();

// Runs body(item, thread_index) for item in [0, count) on min(threads, count) std::threads that
// take items from a shared counter (so uneven items, e.g. causal blocks, balance). Which thread
// runs an item never changes what the item computes. The first exception thrown by a body is
// rethrown here once all threads have stopped. Called inside a CancellableScope, each item is a
// cancellation point (core/cancel.hpp): a cancel request ends the loop with Error(Cancelled).
void parallel_for(std::int64_t count, int threads,
                  const std::function<void(std::int64_t item, int thread_index)>& body);

}  // namespace attnsuite::cpu
