// The batch-size tuner: for one backend and shape, the batch with the highest throughput
// (tokens/s) whose memory and p95 latency stay under the user's limits. It only sees an
// evaluation callback, so it runs as well on the real runner (tune/batch_evaluator.hpp) as on
// a simulated cost model (the tests).
//
// Search (docs/methodology.md, "Batch tuning"):
//  1. grow: min_batch, 4·min_batch, 16·min_batch, … until a batch is infeasible or max_batch;
//  2. bisect between the last feasible and the first infeasible batch for the largest
//     feasible one (memory and latency grow with the batch, so feasibility is one interval);
//  3. refine around the throughput peak: one probe per step, at the midpoint of the wider side
//     of the bracket (best batch so far and its nearest evaluated neighbours; of two equal
//     sides, the one whose neighbour is faster), until the neighbours are adjacent batches —
//     or, with limits.tolerance > 0, until the neighbour on a side is as fast as the best
//     within max(2·noise, tolerance): that side is not split further (fewer evaluations, but
//     on the H200 headline suite one backend's answer 1.2% under a peak the split finds).
//     Throughput need not peak at the boundary (a wave-quantized GPU grid, a CPU working set
//     that leaves the cache).
// Every distinct batch is evaluated once; the count of evaluations is the cost.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attnsuite::tune {

// What one evaluation measured.
struct BatchMeasurement {
  enum class Outcome { Ok, OutOfMemory, Failed };
  Outcome outcome = Outcome::Ok;
  double tokens_per_s = 0;
  double p95_ms = 0;
  double median_ms = 0;
  double memory_bytes = 0;   // device memory the case held at its peak: inputs plus extra
  double noise = 0;          // relative spread of the latency samples, 0 when unknown
  // Device memory in use after the probe minus before it (cudaMemGetInfo); unset where the
  // device cannot say. A caching allocator or a library's first-use workspace shows up here.
  std::optional<double> device_retained_bytes;
  std::string reason;        // OutOfMemory / Failed: the error; Ok: warnings, if any
};

struct BatchLimits {
  int min_batch = 1;
  int max_batch = 1024;
  std::optional<double> max_memory_bytes;  // unset: only out-of-memory limits
  std::optional<double> max_p95_ms;        // unset: no latency target
  // > 0: the refine phase does not split a side whose neighbour's throughput is within
  // max(2·√(σa² + σb²), tolerance) of the best's (σ: the relative spread of each probe's latency
  // samples). 0 (the default): split down to adjacent batches.
  double tolerance = 0;

  // Throws Error(Usage) naming the bad value and what is allowed.
  void validate() const;
};

struct BatchProbe {
  int batch = 0;
  BatchMeasurement measurement;
  bool feasible = false;
  std::string infeasible_reason;  // "out of memory: …", "memory 17.2 GiB > limit 16 GiB", "p95 …"
  std::string phase;              // grow, bisect, refine, sweep
};

struct BatchTuneResult {
  std::vector<BatchProbe> probes;  // in evaluation order, one per distinct batch
  std::optional<BatchProbe> best;  // highest tokens/s among the feasible probes
  int largest_feasible = 0;        // the feasibility boundary the search found (0: none)
  bool interrupted = false;        // the evaluator was cancelled
  std::string failure;             // an evaluation failed (not out of memory): why; the search stopped
  int evaluations() const { return static_cast<int>(probes.size()); }
  // Why there is no best: the failure, or why min_batch is infeasible.
  std::string no_result_reason() const;
};

// Returns the measurement of one batch, or nullopt when cancelled (the search stops).
using EvaluateBatch = std::function<std::optional<BatchMeasurement>(int batch)>;

// Whether `probe`'s throughput is the same as `best`'s or higher, within the noise of both and
// at least `floor` (relative).
bool within_noise_of(const BatchProbe& probe, const BatchProbe& best, double floor);

// Applies the limits to a measurement.
BatchProbe judge(int batch, const BatchMeasurement& measurement, const BatchLimits& limits);

// The search above.
BatchTuneResult search_batch(const EvaluateBatch& evaluate, const BatchLimits& limits);

// The exhaustive check: every batch from min_batch up, until max_batch, the first batch that is
// infeasible by memory (out of memory or over the limit: memory only grows with the batch), or
// the third consecutive batch over the p95 target (one over it may be noise). Batches already
// in `known` (a search's probes) are taken from there instead of measured again; they still
// count as swept.
BatchTuneResult sweep_batches(const EvaluateBatch& evaluate, const BatchLimits& limits,
                              const std::vector<BatchProbe>& known = {});

}  // namespace attnsuite::tune
