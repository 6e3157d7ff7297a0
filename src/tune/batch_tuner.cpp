#include "tune/batch_tuner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "attnsuite/error.hpp"
#include "bench/statistics.hpp"

namespace attnsuite::tune {

namespace {

constexpr double kGiB = 1073741824.0;
// The exhaustive sweep stops at this many consecutive batches over the p95 target.
constexpr int kSweepLatencyMisses = 3;
// The grow phase multiplies the batch by this. ×4 rather than ×2: GPU throughput mostly rises
// up to the largest batches tried, and the refine phase probes the top interval anyway; replayed
// on the H200 headline sweeps of 2026-12-04 (tune-headline.json, max batch 32) ×2 took 10–13
// evaluations and ×4 8–11, both landing on the sweep's optimum.
constexpr long kGrowth = 4;

bool memory_infeasible(const BatchProbe& probe) {
  return probe.measurement.outcome == BatchMeasurement::Outcome::OutOfMemory ||
         probe.infeasible_reason.starts_with("memory");
}

// Evaluates each batch once and keeps the probes in order.
class Search {
 public:
  // with_budget: the search's probes stop at limits.time_budget_s; the exhaustive sweep's do not.
  Search(const EvaluateBatch& evaluate, const BatchLimits& limits, BatchTuneResult& result, bool with_budget)
      : evaluate_(evaluate), limits_(limits), result_(result), with_budget_(with_budget) {}

  // The probe of a batch (measured now or before); nullptr when the search must stop.
  const BatchProbe* probe(int batch, const char* phase) {
    if (const auto found = index_.find(batch); found != index_.end()) return &result_.probes[found->second];
    if (stopped()) return nullptr;
    if (with_budget_ && limits_.time_budget_s > 0 && !result_.probes.empty() &&
        result_.seconds >= limits_.time_budget_s) {
      result_.time_budget_reached = true;
      return nullptr;
    }
    const std::optional<BatchMeasurement> measured = evaluate_(batch);
    if (!measured) {
      result_.interrupted = true;
      return nullptr;
    }
    result_.seconds += measured->seconds;
    BatchProbe p = judge(batch, *measured, limits_);
    p.phase = phase;
    if (measured->outcome == BatchMeasurement::Outcome::Failed)
      result_.failure = fmt::format("batch {}: {}", batch, measured->reason);
    index_[batch] = result_.probes.size();
    result_.probes.push_back(std::move(p));
    return stopped() ? nullptr : &result_.probes.back();
  }
  void adopt(const BatchProbe& known) {
    if (index_.contains(known.batch)) return;
    index_[known.batch] = result_.probes.size();
    result_.probes.push_back(known);
  }
  bool stopped() const { return result_.interrupted || !result_.failure.empty() || result_.time_budget_reached; }
  bool evaluated(int batch) const { return index_.contains(batch); }
  // The probe of a batch evaluated before, or nullptr.
  const BatchProbe* known(int batch) const {
    const auto found = index_.find(batch);
    return found == index_.end() ? nullptr : &result_.probes[found->second];
  }
  // Nearest evaluated batch below / above `batch`, if any.
  std::optional<int> below(int batch) const {
    auto it = index_.lower_bound(batch);
    if (it == index_.begin()) return std::nullopt;
    return std::prev(it)->first;
  }
  std::optional<int> above(int batch) const {
    auto it = index_.upper_bound(batch);
    if (it == index_.end()) return std::nullopt;
    return it->first;
  }

 private:
  const EvaluateBatch& evaluate_;
  const BatchLimits& limits_;
  BatchTuneResult& result_;
  bool with_budget_;
  std::map<int, std::size_t> index_;  // batch → position in result_.probes
};

// Whether a grow step to `probe` gained enough over `best` (the best batch before it) to go on:
// more than flat_gain, and more than twice the noise of both.
bool grew(const BatchProbe& probe, const BatchProbe& best, double flat_gain) {
  const double threshold = bench::same_within(probe.measurement.noise, best.measurement.noise, flat_gain);
  return probe.measurement.tokens_per_s > best.measurement.tokens_per_s * (1 + threshold);
}

void pick_best(BatchTuneResult& result) {
  result.best.reset();
  for (const BatchProbe& p : result.probes) {
    if (!p.feasible) continue;
    if (!result.best || p.measurement.tokens_per_s > result.best->measurement.tokens_per_s) result.best = p;
  }
}

}  // namespace

void BatchLimits::validate() const {
  ATTNSUITE_REQUIRE(min_batch >= 1, fmt::format("--min-batch {} is not allowed: at least 1", min_batch));
  ATTNSUITE_REQUIRE(max_batch >= min_batch,
                    fmt::format("--max-batch {} is not allowed: at least --min-batch ({})", max_batch, min_batch));
  ATTNSUITE_REQUIRE(
      !max_memory_bytes || *max_memory_bytes > 0,
      fmt::format("--max-memory-gib {} is not allowed: more than 0", max_memory_bytes.value_or(0) / kGiB));
  ATTNSUITE_REQUIRE(!max_p95_ms || *max_p95_ms > 0,
                    fmt::format("--p95-ms {} is not allowed: more than 0", max_p95_ms.value_or(0)));
  ATTNSUITE_REQUIRE(tolerance >= 0 && tolerance < 1,
                    fmt::format("--tolerance {} is not allowed: from 0 up to (not including) 1", tolerance));
  ATTNSUITE_REQUIRE(flat_gain >= 0 && flat_gain < 1,
                    fmt::format("--flat-gain {} is not allowed: from 0 (off) up to (not including) 1", flat_gain));
  ATTNSUITE_REQUIRE(time_budget_s >= 0 && time_budget_s <= 1e7,
                    fmt::format("--time-budget {} is not allowed: seconds from 0 (none) to 1e7", time_budget_s));
}

bool within_noise_of(const BatchProbe& probe, const BatchProbe& best, double floor) {
  if (!probe.feasible || !best.feasible || best.measurement.tokens_per_s <= 0) return false;
  const double threshold = bench::same_within(probe.measurement.noise, best.measurement.noise, floor);
  return probe.measurement.tokens_per_s >= best.measurement.tokens_per_s * (1 - threshold);
}

std::string BatchTuneResult::no_result_reason() const {
  if (best) return {};
  if (!failure.empty()) return failure;
  if (interrupted) return "interrupted";
  if (time_budget_reached && probes.empty()) return "the time budget was spent";
  for (const BatchProbe& p : probes)
    if (!p.feasible) return fmt::format("batch {} is infeasible: {}", p.batch, p.infeasible_reason);
  return "no batch was evaluated";
}

BatchProbe judge(int batch, const BatchMeasurement& m, const BatchLimits& limits) {
  BatchProbe probe;
  probe.batch = batch;
  probe.measurement = m;
  switch (m.outcome) {
    case BatchMeasurement::Outcome::OutOfMemory:
      probe.infeasible_reason = m.reason;
      return probe;
    case BatchMeasurement::Outcome::Failed:
      probe.infeasible_reason = "failed: " + m.reason;
      return probe;
    case BatchMeasurement::Outcome::Ok:
      break;
  }
  if (limits.max_memory_bytes && m.memory_bytes > *limits.max_memory_bytes) {
    probe.infeasible_reason =
        fmt::format("memory {:.3g} GiB > limit {:.3g} GiB", m.memory_bytes / kGiB, *limits.max_memory_bytes / kGiB);
  } else if (limits.max_p95_ms && m.p95_ms > *limits.max_p95_ms) {
    probe.infeasible_reason = fmt::format("p95 {:.3g} ms > target {:.3g} ms", m.p95_ms, *limits.max_p95_ms);
  } else {
    probe.feasible = true;
  }
  return probe;
}

BatchTuneResult search_batch(const EvaluateBatch& evaluate, const BatchLimits& limits) {
  limits.validate();
  BatchTuneResult result;
  Search search(evaluate, limits, result, /*with_budget=*/true);

  // 1. Grow, until a batch is infeasible, max_batch, a flat step or the time budget.
  int feasible = 0, infeasible = 0;
  std::optional<BatchProbe> best_grown;
  for (long batch = limits.min_batch;; batch = std::min<long>(kGrowth * batch, limits.max_batch)) {
    const BatchProbe* p = search.probe(static_cast<int>(batch), "grow");
    if (p == nullptr) {
      if (!result.time_budget_reached) return result;
      break;  // the budget: answer with what was measured
    }
    if (!p->feasible) {
      infeasible = p->batch;
      break;
    }
    feasible = p->batch;
    if (best_grown && limits.flat_gain > 0 && !grew(*p, *best_grown, limits.flat_gain)) {
      result.flat_from = p->batch;
      break;
    }
    if (!best_grown || p->measurement.tokens_per_s > best_grown->measurement.tokens_per_s) best_grown = *p;
    if (batch == limits.max_batch) break;
  }
  if (feasible == 0) return result;  // min_batch itself is infeasible

  // 2. Bisect for the largest feasible batch.
  while (infeasible != 0 && infeasible - feasible > 1) {
    const int middle = feasible + (infeasible - feasible) / 2;
    const BatchProbe* p = search.probe(middle, "bisect");
    if (p == nullptr) break;
    (p->feasible ? feasible : infeasible) = middle;
  }
  result.largest_feasible = feasible;
  pick_best(result);

  // 3. Refine around the peak: split one side of the bracket (nearest evaluated neighbours, or
  // the ends of the feasible range) per probe, the wider side first and, of two equal ones, the
  // side whose neighbour is faster; until both neighbours are adjacent or, with --tolerance,
  // as fast as the best within the noise. One side per probe, as a golden-section search does:
  // splitting both sides each round took 12 of the sweep's 32 evaluations for cuda-vanilla on
  // the H200 (2026-12-04, a plateau from batch 10 to 31 and a noisy low probe at 32); one side
  // at a time takes 8-10 on each of the 27 H200 headline curves of that day
  // (tests/data/tune/h200-headline-sweeps.json, BatchTuner.ReplaysTheH200HeadlineSweeps).
  while (result.best && !search.stopped()) {
    const int best = result.best->batch;
    const int left = search.below(best).value_or(limits.min_batch - 1);
    const int right = std::min(search.above(best).value_or(result.largest_feasible + 1), result.largest_feasible + 1);
    // --tolerance 0 (the default) splits down to adjacent batches: on a GPU the peak can sit
    // between two probes that look the same (flash3 on the H200, 2026-12-04: batches 28 and 32
    // within 0.4%, batch 30 1.2% above both; its throughput saw-tooths every 3-4 batches).
    const auto flat_towards = [&](int neighbour) {
      const BatchProbe* p = search.known(neighbour);
      return limits.tolerance > 0 && p != nullptr && within_noise_of(*p, *result.best, limits.tolerance);
    };
    struct Side {
      int gap = 0;
      double neighbour_tokens_per_s = -1;  // -1: an end of the range, not a probe
      int middle = 0;
    };
    std::vector<Side> sides;
    for (const auto& [middle, neighbour] :
         {std::pair{left + (best - left) / 2, left}, std::pair{best + (right - best + 1) / 2, right}}) {
      if (middle <= left || middle >= right || middle == best || search.evaluated(middle)) continue;
      if (flat_towards(neighbour)) continue;
      const BatchProbe* known = search.known(neighbour);
      sides.push_back(
          {std::abs(neighbour - best), known && known->feasible ? known->measurement.tokens_per_s : -1.0, middle});
    }
    if (sides.empty()) break;
    const Side& next = *std::max_element(sides.begin(), sides.end(), [](const Side& a, const Side& b) {
      return a.gap != b.gap ? a.gap < b.gap : a.neighbour_tokens_per_s < b.neighbour_tokens_per_s;
    });
    if (search.probe(next.middle, "refine") == nullptr) break;
    pick_best(result);
  }
  pick_best(result);
  return result;
}

BatchTuneResult sweep_batches(const EvaluateBatch& evaluate, const BatchLimits& limits,
                              const std::vector<BatchProbe>& known) {
  limits.validate();
  BatchTuneResult result;
  Search search(evaluate, limits, result, /*with_budget=*/false);
  std::map<int, const BatchProbe*> reuse;
  for (const BatchProbe& p : known) reuse[p.batch] = &p;
  int latency_misses = 0;
  for (int batch = limits.min_batch; batch <= limits.max_batch; ++batch) {
    const BatchProbe* p = nullptr;
    if (const auto found = reuse.find(batch); found != reuse.end()) {
      search.adopt(*found->second);
      p = &result.probes.back();
    } else {
      p = search.probe(batch, "sweep");
    }
    if (p == nullptr) break;
    if (p->feasible) {
      result.largest_feasible = batch;
      latency_misses = 0;
      continue;
    }
    if (memory_infeasible(*p) || p->measurement.outcome == BatchMeasurement::Outcome::Failed) break;
    if (++latency_misses >= kSweepLatencyMisses) break;
  }
  pick_best(result);
  return result;
}

}  // namespace attnsuite::tune
