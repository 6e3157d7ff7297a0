#include "report/jsonl.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "attnsuite/error.hpp"
#include "core/atomic_file.hpp"
#include "core/json_limits.hpp"

namespace attnsuite::report {

namespace {

// Length of the file up to and including its last newline.
off_t complete_lines_length(int fd, off_t size, const std::filesystem::path& path) {
  char chunk[4096];
  off_t end = size;
  while (end > 0) {
    const off_t begin = end > static_cast<off_t>(sizeof chunk) ? end - static_cast<off_t>(sizeof chunk) : 0;
    const ssize_t got = ::pread(fd, chunk, static_cast<std::size_t>(end - begin), begin);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_io("read", path, errno);
    }
    for (ssize_t i = got - 1; i >= 0; --i) {
      if (chunk[i] == '\n') return begin + i + 1;
    }
    end = begin;
  }
  return 0;
}

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

}  // namespace

JsonlWriter::JsonlWriter(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  if (fd_ < 0) throw_io("open for appending", path, errno);
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    throw_io("open for appending", path, error);
  }
  try {
    const off_t complete = complete_lines_length(fd_, info.st_size, path);
    if (complete < info.st_size) {
      if (::ftruncate(fd_, complete) != 0) throw_io("remove the partial last line of", path, errno);
      dropped_partial_bytes_ = static_cast<std::size_t>(info.st_size - complete);
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

JsonlWriter::~JsonlWriter() {
  if (fd_ >= 0) ::close(fd_);
}

JsonlWriter::JsonlWriter(JsonlWriter&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      dropped_partial_bytes_(other.dropped_partial_bytes_) {}

JsonlWriter& JsonlWriter::operator=(JsonlWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    dropped_partial_bytes_ = other.dropped_partial_bytes_;
  }
  return *this;
}

void JsonlWriter::append(const bench::ResultRow& row) { write_line(bench::to_ordered_json(row).dump()); }

void JsonlWriter::append_header(const bench::RunHeader& header) {
  write_line(nlohmann::json{{"header", bench::to_json(header)}}.dump());
}

void JsonlWriter::write_line(std::string line) {
  if (fd_ < 0) throw Error(ErrorKind::Io, fmt::format("cannot write '{}': writer was moved from", path_.string()));
  line.push_back('\n');
  // One write per line: with O_APPEND, a line is never interleaved with another writer's.
  write_all(fd_, line, "append to", path_);
  if (::fsync(fd_) != 0) throw_io("append to", path_, errno);
}

std::vector<bench::ResultRow> read_jsonl(const std::filesystem::path& path, std::vector<std::string>* warnings,
                                         bench::RunHeader* header) {
  const std::string text = read_text_file(path);

  // Split into lines first, so we know which one is last.
  std::vector<std::pair<std::size_t, std::string_view>> lines;  // (1-based number, text)
  std::size_t number = 0;
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    ++number;
    const std::string_view line(text.data() + begin, end - begin);
    if (!is_blank(line)) lines.emplace_back(number, line);
    begin = end + 1;
  }

  std::vector<bench::ResultRow> rows;
  rows.reserve(lines.size());
  bool have_header = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto [line_number, line] = lines[i];
    nlohmann::json value = nlohmann::json::parse(
        line, json_depth_limit([&, number = line_number] {
          throw Error(ErrorKind::Io,
                      fmt::format("{} line {}: nested deeper than {} levels", path.string(), number, kMaxJsonDepth));
        }),
        /*allow_exceptions=*/false);
    if (value.is_discarded()) {
      if (i + 1 == lines.size()) {
        if (warnings) {
          warnings->push_back(fmt::format("{} line {}: skipped an incomplete last line (an interrupted write)",
                                          path.string(), line_number));
        }
        break;
      }
      throw Error(ErrorKind::Io, fmt::format("{} line {}: not valid JSON", path.string(), line_number));
    }
    try {
      if (value.is_object() && value.contains("header") && !value.contains("backend")) {
        if (!have_header && header) *header = bench::header_from_json(value["header"]);
        have_header = true;
        continue;
      }
      rows.push_back(bench::row_from_json(value));
    } catch (const Error& error) {
      throw Error(ErrorKind::Io, fmt::format("{} line {}: {}", path.string(), line_number, error.what()));
    }
  }
  return rows;
}

}  // namespace attnsuite::report
