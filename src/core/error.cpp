#include "attnsuite/error.hpp"

#include <fmt/format.h>

namespace attnsuite {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Usage:
      return "usage";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::OutOfMemory:
      return "out of memory";
    case ErrorKind::Device:
      return "device";
    case ErrorKind::Io:
      return "io";
    case ErrorKind::Internal:
      return "internal";
    case ErrorKind::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

namespace detail {
void throw_check_failure(ErrorKind kind, const char* expression, const char* file, int line,
                         const std::string& message) {
  throw Error(kind, fmt::format("{} ({}:{}: check '{}' failed)", message, file, line, expression));
}
}  // namespace detail

}  // namespace attnsuite
