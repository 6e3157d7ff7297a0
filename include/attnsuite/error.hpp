// The one error type of attnsuite. Library code throws it; only the CLI turns it into an exit code.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace attnsuite {

enum class ErrorKind {
  Usage,        // bad input from the user: a value that is not allowed (CLI exit code 2)
  Unsupported,  // a backend cannot run a problem
  OutOfMemory,  // an allocation failed or would not fit
  Device,       // a CUDA / cuDNN / cuBLAS call failed
  Io,           // a file could not be read or written
  Internal,     // a broken invariant: a bug in attnsuite
  Cancelled,    // the run was asked to stop (SIGINT/SIGTERM; core/cancel.hpp): not a failure
};

std::string_view to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
[[noreturn]] void throw_check_failure(ErrorKind kind, const char* expression, const char* file, int line,
                                      const std::string& message);
}  // namespace detail

}  // namespace attnsuite

// ATTNSUITE_CHECK(cond, kind, message): throws attnsuite::Error with file:line, the failing
// expression and the message when cond is false.
#define ATTNSUITE_CHECK(cond, kind, message)                                                  \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      ::attnsuite::detail::throw_check_failure((kind), #cond, __FILE__, __LINE__, (message)); \
    }                                                                                         \
  } while (0)

// For user-facing validation: one clear line (value and what is allowed), no file:line.
#define ATTNSUITE_REQUIRE(cond, message)                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      throw ::attnsuite::Error(::attnsuite::ErrorKind::Usage, (message)); \
    }                                                                     \
  } while (0)
