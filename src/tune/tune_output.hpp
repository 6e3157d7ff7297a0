// What `attnsuite tune --batch` writes: one entry per tuned case (backend × shape without the
// batch), as JSON ("tuning" in tune.json). The report reads the same JSON back
// (report/tuning_table.hpp), so a tune file renders anywhere a results file does.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/result.hpp"
#include "tune/batch_tuner.hpp"

namespace attnsuite::tune {

struct TuneEntry {
  bench::ResultRow identity;  // the case's fields (backend, shape); batch and results unused
  BatchLimits limits;
  BatchTuneResult search;
  std::optional<BatchTuneResult> sweep;  // --exhaustive
};

// Whether the search's best is the sweep's, within the noise: the same batch, or throughput
// no lower than `attnsuite compare`'s threshold for "the same", max(2·√(σa² + σb²), 1%).
bool agrees_within_noise(const BatchProbe& search_best, const BatchProbe& sweep_best);

nlohmann::ordered_json to_json(const TuneEntry& entry);

// The shape a tune file's entry was tuned at, as both tuners write it: heads_q, heads_kv,
// seq_q, seq_kv, head_dim, causal (in that order) from the case's row.
void write_shape(nlohmann::ordered_json& out, const bench::ResultRow& identity);

// The table of these entries is report::tuning_table (report/tuning_table.hpp), which reads
// this JSON back.

}  // namespace attnsuite::tune
