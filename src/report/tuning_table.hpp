// The table of a tune file: what `attnsuite tune --batch` prints, and what the report shows of
// a tune.json (its "tuning" array, written by tune/tune_output.hpp's to_json).
#pragma once

#include <nlohmann/json.hpp>

#include "report/table.hpp"

namespace attnsuite::report {

// Columns: backend, seq len, best batch, tokens/s, p95 ms, peak memory, evaluations; with a
// sweep also its best batch, tokens/s, evaluations and whether they agree. A case without a
// best shows why. Reads the JSON of tune::to_json (a "tuning" array).
TextTable tuning_table(const nlohmann::json& tuning);

}  // namespace attnsuite::report
