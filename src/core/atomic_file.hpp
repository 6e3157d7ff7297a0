// Writing result files so that a crash or a full disk never leaves a half-written file behind.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace attnsuite::report {

// Writes content to a temporary file in the same directory, flushes and fsyncs it, then renames
// it over path (atomic on POSIX), so readers see the old file or the new one, never a mix. An
// existing target keeps its permissions. On failure the temporary file is removed and
// Error(Io) names the path and the system's reason.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// Creates the directory (and its parents) if needed; Error(Io) when it cannot be created or is
// not writable.
void ensure_writable_directory(const std::filesystem::path& directory);

// Error(Io) "cannot <action> '<path>': <strerror(error_number)>".
[[noreturn]] void throw_io(std::string_view action, const std::filesystem::path& path, int error_number);

// Writes all of content to fd, again after a short write or EINTR; Error(Io) as throw_io(action,
// path, errno) otherwise.
void write_all(int fd, std::string_view content, std::string_view action, const std::filesystem::path& path);

// Reads a whole file; Error(Io) naming the path and the system's reason ("No such file...").
std::string read_text_file(const std::filesystem::path& path);

}  // namespace attnsuite::report
