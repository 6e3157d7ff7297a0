#include "report/load.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include "attnsuite/error.hpp"
#include "core/atomic_file.hpp"
#include "core/enum_names.hpp"
#include "core/json_limits.hpp"
#include "report/jsonl.hpp"

namespace attnsuite::report {

namespace {

using bench::ColumnType;
using bench::ResultRow;

struct CsvRecord {
  std::size_t line = 0;  // 1-based line where the record starts
  std::vector<std::string> cells;
};

// RFC 4180: quoted cells may hold commas, doubled quotes and line breaks; CRLF or LF.
std::vector<CsvRecord> parse_csv(std::string_view text, std::string_view source) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a spreadsheet's UTF-8 BOM
  std::vector<CsvRecord> records;
  CsvRecord record;
  std::string cell;
  std::size_t line = 1;
  std::size_t quote_line = 0;
  bool in_quotes = false;
  bool cell_was_quoted = false;
  bool record_open = false;
  record.line = line;

  const auto end_cell = [&] {
    record.cells.push_back(std::move(cell));
    cell.clear();
    cell_was_quoted = false;
  };
  const auto end_record = [&] {
    end_cell();
    // A blank line is no record.
    if (!(record.cells.size() == 1 && record.cells[0].empty())) records.push_back(std::move(record));
    record = {};
    record_open = false;
  };

  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!record_open) {
      record.line = line;
      record_open = true;
    }
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          cell += '"';
          ++i;
        } else {
          in_quotes = false;
        }
      } else {
        if (c == '\n') ++line;
        cell += c;
      }
      continue;
    }
    switch (c) {
      case '"':
        if (!cell.empty() || cell_was_quoted) {
          throw Error(ErrorKind::Io, fmt::format("{} line {}: a quote inside an unquoted cell", source, line));
        }
        in_quotes = true;
        cell_was_quoted = true;
        quote_line = line;
        break;
      case ',':
        end_cell();
        break;
      case '\r':
        if (i + 1 < text.size() && text[i + 1] == '\n') break;  // the '\n' ends the record
        [[fallthrough]];
      case '\n':
        end_record();
        ++line;
        break;
      default:
        if (cell_was_quoted) {
          throw Error(ErrorKind::Io, fmt::format("{} line {}: text after a closing quote", source, line));
        }
        cell += c;
    }
  }
  if (in_quotes) {
    throw Error(ErrorKind::Io, fmt::format("{} line {}: a quoted cell is never closed", source, quote_line));
  }
  if (record_open) end_record();
  return records;
}

template <class Number>
bool parse_whole(std::string_view text, Number& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The JSON value row_from_json expects for a cell, or nullopt when the text does not fit.
std::optional<nlohmann::json> cell_to_json(std::string_view text, ColumnType type) {
  switch (type) {
    case ColumnType::Text:
      return nlohmann::json(std::string(text));
    case ColumnType::Integer: {
      if (std::uint64_t value = 0; parse_whole(text, value)) return nlohmann::json(value);
      if (std::int64_t value = 0; parse_whole(text, value)) return nlohmann::json(value);
      return std::nullopt;
    }
    case ColumnType::Boolean: {
      const std::string word = lowercase(text);
      if (word == "true" || word == "1") return nlohmann::json(true);
      if (word == "false" || word == "0") return nlohmann::json(false);
      return std::nullopt;
    }
    case ColumnType::Number: {
      if (text.empty()) return nlohmann::json(nullptr);
      const std::string word = lowercase(text);
      if (word == "nan" || word == "inf" || word == "-inf") return nlohmann::json(word);
      if (double value = 0; parse_whole(text, value)) return nlohmann::json(value);
      return std::nullopt;
    }
  }
  return std::nullopt;
}

constexpr EnumName<ColumnType> kExpectedValues[] = {{ColumnType::Text, "text"},
                                                    {ColumnType::Integer, "an integer"},
                                                    {ColumnType::Boolean, "true or false"},
                                                    {ColumnType::Number, "a number, nan, inf or an empty cell"}};

std::string_view expected_for(ColumnType type) { return name_of(kExpectedValues, type, "a value"); }

LoadedResults load_json(const std::filesystem::path& path) {
  const std::string text = read_text_file(path);
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(
        text, json_depth_limit([&] {
          throw Error(ErrorKind::Io, fmt::format("{}: nested deeper than {} levels", path.string(), kMaxJsonDepth));
        }));
  } catch (const nlohmann::json::exception& error) {  // parse_error, and out_of_range for 1e999
    // nlohmann's message carries the line and column of the error.
    throw Error(ErrorKind::Io, fmt::format("{}: not valid JSON: {}", path.string(), error.what()));
  }
  LoadedResults loaded;
  const nlohmann::json* rows = nullptr;
  if (document.is_array()) {
    rows = &document;
  } else if (document.is_object() && document.contains("rows") && document["rows"].is_array()) {
    rows = &document["rows"];
    if (const auto header = document.find("header"); header != document.end()) {
      try {
        loaded.header = bench::header_from_json(*header);
      } catch (const Error& error) {
        throw Error(ErrorKind::Io, fmt::format("{}: {}", path.string(), error.what()));
      }
    }
  } else {
    throw Error(ErrorKind::Io,
                fmt::format("{}: expected an object with a \"rows\" array (or an array of rows)", path.string()));
  }
  if (document.is_object()) {
    if (const auto tuning = document.find("tuning"); tuning != document.end()) {
      if (!tuning->is_array())
        throw Error(ErrorKind::Io, fmt::format("{}: \"tuning\" must be an array", path.string()));
      loaded.tuning = *tuning;
    }
  }
  loaded.rows.reserve(rows->size());
  for (std::size_t i = 0; i < rows->size(); ++i) {
    try {
      loaded.rows.push_back(bench::row_from_json((*rows)[i]));
    } catch (const Error& error) {
      throw Error(ErrorKind::Io, fmt::format("{}: row {}: {}", path.string(), i + 1, error.what()));
    }
  }
  return loaded;
}

}  // namespace

std::vector<ResultRow> rows_from_csv(std::string_view text, std::string_view source) {
  const std::vector<CsvRecord> records = parse_csv(text, source);
  if (records.empty()) {
    throw Error(ErrorKind::Io, fmt::format("{}: empty, expected a header line", source));
  }
  const CsvRecord& header = records.front();
  std::vector<std::optional<ColumnType>> types;
  for (const std::string& name : header.cells) types.push_back(bench::column_type(name));
  for (const char* required : {"backend", "status"}) {
    if (std::find(header.cells.begin(), header.cells.end(), required) == header.cells.end()) {
      throw Error(ErrorKind::Io,
                  fmt::format("{} line {}: the header has no '{}' column", source, header.line, required));
    }
  }

  std::vector<ResultRow> rows;
  rows.reserve(records.size() - 1);
  for (std::size_t r = 1; r < records.size(); ++r) {
    const CsvRecord& record = records[r];
    if (record.cells.size() != header.cells.size()) {
      throw Error(ErrorKind::Io, fmt::format("{} line {}: {} cells, but the header has {}", source, record.line,
                                             record.cells.size(), header.cells.size()));
    }
    nlohmann::json object = nlohmann::json::object();
    for (std::size_t c = 0; c < record.cells.size(); ++c) {
      if (!types[c]) continue;  // a column of a newer version
      auto value = cell_to_json(record.cells[c], *types[c]);
      if (!value) {
        throw Error(ErrorKind::Io, fmt::format("{} line {}: column '{}': expected {}, got '{}'", source, record.line,
                                               header.cells[c], expected_for(*types[c]), record.cells[c]));
      }
      object[header.cells[c]] = std::move(*value);
    }
    try {
      rows.push_back(bench::row_from_json(object));
    } catch (const Error& error) {
      throw Error(ErrorKind::Io, fmt::format("{} line {}: {}", source, record.line, error.what()));
    }
  }
  return rows;
}

LoadedResults load_results(const std::filesystem::path& path) {
  const std::string extension = lowercase(path.extension().string());
  if (extension != ".json" && extension != ".jsonl" && extension != ".csv") {
    throw Error(ErrorKind::Usage, fmt::format("{}: unknown results format '{}'; expected .json, .jsonl or .csv",
                                              path.string(), extension));
  }
  if (extension == ".json") return load_json(path);
  LoadedResults loaded;
  if (extension == ".jsonl") {
    loaded.rows = read_jsonl(path, &loaded.warnings, &loaded.header);
  } else {
    loaded.rows = rows_from_csv(read_text_file(path), path.string());
  }
  return loaded;
}

}  // namespace attnsuite::report
