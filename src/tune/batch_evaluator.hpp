// The tuner's real evaluation: one batch size of a case measured by the benchmark runner, the
// same code path as `attnsuite bench`, so a tuned figure is a bench figure.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/result.hpp"
#include "bench/runner.hpp"
#include "tune/batch_tuner.hpp"

namespace attnsuite::tune {

class RunnerBatchEvaluator {
 public:
  // `base` is the case to tune; its batch is replaced by each probed batch. `registry` is the
  // runner's (it says on which device the backend's memory is tracked).
  RunnerBatchEvaluator(bench::Runner& runner, Registry& registry, bench::Case base,
                       std::function<bool()> cancelled = {});

  // Runs the case at `batch`. An Error of kind OutOfMemory (or std::bad_alloc) is an
  // OutOfMemory outcome; any other failure, or a skip, is Failed. After every probe the
  // device's tracked memory must be back at what it was before (checked with its
  // MemoryTracker); if not, throws Error(Internal) naming the bytes left. nullopt: cancelled.
  std::optional<BatchMeasurement> operator()(int batch);

  // Every row measured, in order: the tune's results file holds them.
  const std::vector<bench::ResultRow>& rows() const { return rows_; }
  // Called with each row as it is measured (progress output).
  void on_row(std::function<void(const bench::ResultRow&)> callback) { on_row_ = std::move(callback); }

 private:
  bench::Runner& runner_;
  Registry& registry_;
  bench::Case base_;
  std::function<bool()> cancelled_;
  std::function<void(const bench::ResultRow&)> on_row_;
  std::vector<bench::ResultRow> rows_;
};

// Bytes of Q, K and V of a problem: with the row's peak extra memory, what a case holds.
double input_bytes(const AttentionProblem& problem);

}  // namespace attnsuite::tune
