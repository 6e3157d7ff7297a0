// Reading results files back: our .json, .jsonl and .csv, for report and compare.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/result.hpp"

namespace attnsuite::report {

struct LoadedResults {
  bench::RunHeader header;  // default (empty) for CSV, and for JSONL without a header line
  std::vector<bench::ResultRow> rows;
  std::vector<std::string> warnings;  // e.g. an incomplete last JSONL line that was skipped
  nlohmann::json tuning;              // a tune file's "tuning" array (attnsuite tune --batch); null otherwise
};

// By extension: .json ({"header", "rows"}, or a bare array of rows), .jsonl, .csv. Throws
// Error(Io) for a missing or unreadable file or malformed content, Error(Usage) for another
// extension; the message is one line naming the file (and line) and what is wrong.
LoadedResults load_results(const std::filesystem::path& path);

// Parses CSV text written by to_csv (or a spreadsheet): the header names the columns, in any
// order; unknown columns are ignored; "backend" and "status" are required. `source` names the
// file in error messages. Throws Error(Io).
std::vector<bench::ResultRow> rows_from_csv(std::string_view text, std::string_view source);

}  // namespace attnsuite::report
