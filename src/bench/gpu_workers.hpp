// bench --gpus: one worker thread per GPU over a shared queue of a sweep's cases (issue 10).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/result.hpp"
#include "bench/runner.hpp"

namespace attnsuite::bench {

struct IndexedCase {
  std::size_t index = 0;  // in the plan
  const Case* c = nullptr;
};

struct GpuWorkCallbacks {
  std::function<bool()> cancelled;
  // Both are called with the pool's lock held: never two at once.
  std::function<void(const IndexedCase&, int gpu)> on_start;
  std::function<void(const IndexedCase&, int gpu, ResultRow row)> on_row;
};

// Runs `todo` (in plan order) and returns whether it was interrupted. The cases of CUDA
// backends go to one worker thread per device in `gpus`, each with its own registry (its own
// backend instances) and its own runner on that device; consecutive cases of one shape (the
// backends of one input) stay together on one worker, so inputs and the fp64 reference are made
// once per shape, and workers take the next group from a shared queue. The cases of CPU
// backends run afterwards on the calling thread with `registry`, alone, so that they are not
// timed while GPU workers load the host. An Error in a worker (its device cannot be used) stops
// the others and is rethrown here, naming the GPU.
bool run_on_gpus(const SweepSpec& spec, const std::vector<int>& gpus, const std::vector<IndexedCase>& todo,
                 Registry& registry, const GpuWorkCallbacks& callbacks);

// The pool under run_on_gpus, for any kind of worker (the CPU tests run it with CPU runners).
// Worker w gets its runner (and the registry that runner uses) from make_worker(w), called on
// the worker's own thread; `parallel` says which cases go to the workers, the others run after
// them on the calling thread with `serial`. `label(w)` names a worker in errors ("GPU 3").
struct Worker {
  std::unique_ptr<Registry> registry;
  std::unique_ptr<Runner> runner;
};
bool run_on_workers(int workers, const std::vector<IndexedCase>& todo, const std::function<bool(const Case&)>& parallel,
                    const std::function<Worker(int)>& make_worker, const std::function<std::string(int)>& label,
                    Runner& serial, const GpuWorkCallbacks& callbacks);

// The devices of --gpus: "all" or a comma-separated list of indices. Throws Error(Usage) for a
// bad list and Error(Device) with one line when this build or machine has no CUDA GPU.
std::vector<int> parse_gpu_list(const std::string& text);

}  // namespace attnsuite::bench
