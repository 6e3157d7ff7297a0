#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "attnsuite/error.hpp"

namespace attnsuite::report {

namespace {

namespace fs = std::filesystem;

// Owns a temporary file until it is renamed into place; removes it otherwise.
class TempFile {
 public:
  explicit TempFile(const fs::path& target) {
    static std::atomic<unsigned> counter{0};
    const fs::path directory = target.has_parent_path() ? target.parent_path() : fs::path(".");
    // O_EXCL with a name unique to this process and call; retry in the unlikely event that a
    // stale file of a crashed process with the same pid is in the way.
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = directory / fmt::format(".{}.tmp-{}-{}", target.filename().string(), static_cast<long>(::getpid()),
                                      counter.fetch_add(1));
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0) return;
      if (errno != EEXIST) break;
    }
    throw_io("create a temporary file for", target, errno);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const { return fd_; }
  const fs::path& path() const { return path_; }
  // Closes the descriptor; returns 0 or an errno value (close can report a delayed write error).
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result == 0 ? 0 : errno;
  }
  void release() { path_.clear(); }

 private:
  fs::path path_;
  int fd_ = -1;
};

}  // namespace

void throw_io(std::string_view action, const fs::path& path, int error_number) {
  throw Error(ErrorKind::Io, fmt::format("cannot {} '{}': {}", action, path.string(), std::strerror(error_number)));
}

void write_all(int fd, std::string_view content, std::string_view action, const fs::path& path) {
  while (!content.empty()) {
    const ssize_t written = ::write(fd, content.data(), content.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      throw_io(action, path, errno);
    }
    content.remove_prefix(static_cast<std::size_t>(written));
  }
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  if (path.filename().empty()) {
    throw Error(ErrorKind::Io, fmt::format("cannot write '{}': not a file name", path.string()));
  }
  TempFile temp(path);
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0 && S_ISREG(existing.st_mode)) {
    ::fchmod(temp.fd(), existing.st_mode & 07777);  // best effort: keep the target's mode
  }
  write_all(temp.fd(), content, "write", path);
  if (::fsync(temp.fd()) != 0) throw_io("write", path, errno);
  if (const int error = temp.close(); error != 0) throw_io("write", path, error);
  if (::rename(temp.path().c_str(), path.c_str()) != 0) throw_io("write", path, errno);
  temp.release();
  // Make the rename itself durable. Best effort: some file systems refuse fsync on directories.
  const fs::path directory = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void ensure_writable_directory(const fs::path& directory) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) {
    throw Error(ErrorKind::Io, fmt::format("cannot create directory '{}': {}", directory.string(), error.message()));
  }
  if (!fs::is_directory(directory, error)) {
    throw Error(ErrorKind::Io, fmt::format("cannot use '{}' as a directory: it is not one", directory.string()));
  }
  if (::access(directory.c_str(), W_OK | X_OK) != 0) throw_io("write into directory", directory, errno);
}

std::string read_text_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io("read", path, errno);
  std::string text;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error = errno;  // EISDIR for a directory
      ::close(fd);
      throw_io("read", path, error);
    }
    text.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(fd);
  return text;
}

}  // namespace attnsuite::report
