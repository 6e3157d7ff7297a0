// The batch-size tuner: for one backend and shape, the batch with the highest throughput
// (tokens/s) whose memory and p95 latency stay under the user's limits. It only sees an
// evaluation callback, so it runs as well on the real runner (tune/batch_evaluator.hpp) as on
// a simulated cost model (the tests).
//
// Search (docs/methodology.md, "Batch tuning"):
//  1. grow: min_batch, 4·min_batch, 16·min_batch, … until a batch is infeasible, max_batch, or
//     a step that gains less than max(limits.flat_gain, 2·noise) over the best before it (a
//     flat curve, as on a CPU, whose throughput no longer grows with the batch: the README's
//     CPU example grew to batch 256 in 20 probes and 9 min 50 s without it);
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
// Every distinct batch is evaluated once; the count of evaluations is the cost. With
// limits.time_budget_s > 0, no probe starts once the probes so far took that long (their
// BatchMeasurement::seconds): the answer is the best batch measured by then.
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
  double memory_bytes = 0;  // device memory the case held at its peak: inputs plus extra
  double noise = 0;         // relative spread of the latency samples, 0 when unknown
  // Device memory in use after the probe minus before it (cudaMemGetInfo); unset where the
  // device cannot say. A caching allocator or a library's first-use workspace shows up here.
  std::optional<double> device_retained_bytes;
  std::string reason;  // OutOfMemory / Failed: the error; Ok: warnings, if any
  double seconds = 0;  // what the probe cost (wall time; a simulated cost in tests)
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
  // The grow phase stops at a step (×4) whose throughput gains less than this (relative), or
  // than twice the noise, over the best batch before it. 0: grow to max_batch or the first
  // infeasible batch.
  double flat_gain = kDefaultFlatGain;
  // > 0: the search starts no probe once its probes took this many seconds. 0: no budget.
  double time_budget_s = kDefaultTimeBudgetS;

  // 5%: a ×4 step that gains less is not worth the 4× longer probes that follow it; on the
  // H200 headline curves (tests/data/tune/h200-headline-sweeps.json) every step up to the
  // optimum gained more (BatchTuner.ReplaysTheH200HeadlineSweeps).
  static constexpr double kDefaultFlatGain = 0.05;
  // Per case (backend × shape): a backstop for curves the flat rule does not stop. The README's
  // CPU example took 12 s and 16 s a case with the flat rule (4 probes each, the shared 2-core
  // VM under load), 9 min 50 s for both without it.
  static constexpr double kDefaultTimeBudgetS = 60;

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
  // The largest feasible batch probed: the feasibility boundary the search found, unless the
  // grow phase stopped on a flat curve (flat_from) or at the time budget (0: none).
  int largest_feasible = 0;
  bool interrupted = false;          // the evaluator was cancelled
  std::string failure;               // an evaluation failed (not out of memory): why; the search stopped
  int flat_from = 0;                 // > 0: the grow phase stopped here, the step to it gained too little
  bool time_budget_reached = false;  // probes were left out: the time budget was spent
  double seconds = 0;                // the probes' cost, summed
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
