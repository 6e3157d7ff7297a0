// Rows streamed one JSON object per line as cases finish, so an interrupted sweep keeps every
// finished case and --resume can skip them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "bench/result.hpp"

namespace attnsuite::report {

class JsonlWriter {
 public:
  // Opens (creating if needed) for append. A partial last line left by an interrupted write is
  // cut off first, so the next row starts on a line of its own; read_jsonl would skip that
  // partial line anyway. Throws Error(Io).
  explicit JsonlWriter(const std::filesystem::path& path);
  ~JsonlWriter();
  JsonlWriter(JsonlWriter&& other) noexcept;
  JsonlWriter& operator=(JsonlWriter&& other) noexcept;
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // Writes one line, then flushes and fsyncs it. Throws Error(Io).
  void append(const bench::ResultRow& row);
  // Writes {"header": {...}} as one line; read_jsonl returns the first such line as the header.
  void append_header(const bench::RunHeader& header);

  const std::filesystem::path& path() const { return path_; }
  // Bytes of a partial last line that the constructor removed (0 when the file was clean).
  std::size_t dropped_partial_bytes() const { return dropped_partial_bytes_; }

 private:
  void write_line(std::string line);

  std::filesystem::path path_;
  int fd_ = -1;
  std::size_t dropped_partial_bytes_ = 0;
};

// Reads the rows of a JSONL file. A last line that is not valid JSON (an interrupted write) is
// skipped with a message in *warnings (when given); a bad line anywhere else throws Error(Io)
// with the file and line number. Blank lines are ignored. When header is given, it receives the
// first {"header": ...} line (left as is when there is none).
std::vector<bench::ResultRow> read_jsonl(const std::filesystem::path& path, std::vector<std::string>* warnings,
                                         bench::RunHeader* header = nullptr);

}  // namespace attnsuite::report
