#include "tune/batch_evaluator.hpp"

#include <fmt/format.h>

#include <chrono>

#include "attnsuite/error.hpp"
#include "attnsuite/memory.hpp"
#include "report/compare.hpp"

namespace attnsuite::tune {

double input_bytes(const AttentionProblem& p) {
  const double per_batch = static_cast<double>(p.seq_q) * p.heads_q * p.head_dim +
                           static_cast<double>(p.seq_kv) * p.heads_kv * (p.head_dim + p.dim_v());
  return per_batch * p.batch * static_cast<double>(size_of(p.dtype));
}

RunnerBatchEvaluator::RunnerBatchEvaluator(bench::Runner& runner, Registry& registry, bench::Case base,
                                           std::function<bool()> cancelled)
    : runner_(runner), registry_(registry), base_(std::move(base)), cancelled_(std::move(cancelled)) {}

std::optional<BatchMeasurement> RunnerBatchEvaluator::operator()(int batch) {
  bench::Case c = base_;
  c.problem.batch = batch;
  const Device device = registry_.contains(c.backend) ? registry_.find(c.backend).device() : Device{DeviceType::Cpu, 0};
  const MemoryTracker& tracker = MemoryTracker::for_device(device.type, device.index);
  const std::size_t baseline = tracker.current();
  // The device's own count as well, where it has one (a GPU); a device that cannot be opened
  // is the runner's to report, as a failed row.
  bench::DeviceContext* context = nullptr;
  std::optional<std::size_t> used_before, used_after;
  try {
    context = &runner_.context_for(device);
    used_before = context->used_bytes();
  } catch (const Error&) {
    context = nullptr;
  }

  const auto started = std::chrono::steady_clock::now();
  std::optional<bench::ResultRow> row = runner_.run(c, cancelled_);
  if (!row) return std::nullopt;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (context != nullptr) used_after = context->used_bytes();

  // Every buffer of the probe is freed by now, whether it finished, ran out of memory or failed.
  const std::size_t after = tracker.current();
  ATTNSUITE_CHECK(after == baseline, ErrorKind::Internal,
                  fmt::format("{} memory did not return to its baseline after batch {}: {} bytes before, {} after",
                              to_string(device.type), batch, baseline, after));

  rows_.push_back(*row);
  if (on_row_) on_row_(rows_.back());
  BatchMeasurement m;
  m.seconds = seconds;
  if (used_before && used_after)
    m.device_retained_bytes = static_cast<double>(*used_after) - static_cast<double>(*used_before);
  const bench::ResultRow& r = rows_.back();
  if (r.status == bench::CaseStatus::Failed) {
    m.outcome = r.error_kind == ErrorKind::OutOfMemory ? BatchMeasurement::Outcome::OutOfMemory
                                                       : BatchMeasurement::Outcome::Failed;
    m.reason = r.reason;
    return m;
  }
  if (r.status == bench::CaseStatus::Skipped || !r.tokens_per_s || !r.ms_p95 || !r.peak_mem_mib) {
    m.outcome = BatchMeasurement::Outcome::Failed;
    m.reason = r.status == bench::CaseStatus::Skipped ? "skipped: " + r.reason : "the row has no timing";
    return m;
  }
  m.tokens_per_s = *r.tokens_per_s;
  m.p95_ms = *r.ms_p95;
  m.median_ms = r.ms_median.value_or(0);
  m.memory_bytes = input_bytes(c.problem) + *r.peak_mem_mib * 1048576.0;
  m.noise = report::relative_spread(r).value_or(0);
  m.reason = r.reason;
  return m;
}

}  // namespace attnsuite::tune
