#include "attnsuite/error.hpp"

#include <fmt/format.h>

#include "core/enum_names.hpp"

namespace attnsuite {

namespace {
constexpr EnumName<ErrorKind> kErrorKindNames[] = {{ErrorKind::Usage, "usage"},
                                                   {ErrorKind::Unsupported, "unsupported"},
                                                   {ErrorKind::OutOfMemory, "out of memory"},
                                                   {ErrorKind::Device, "device"},
                                                   {ErrorKind::Io, "io"},
                                                   {ErrorKind::Internal, "internal"},
                                                   {ErrorKind::Cancelled, "cancelled"}};
}  // namespace

std::string_view to_string(ErrorKind kind) { return name_of(kErrorKindNames, kind, "unknown"); }

namespace detail {
void throw_check_failure(ErrorKind kind, const char* expression, const char* file, int line,
                         const std::string& message) {
  throw Error(kind, fmt::format("{} ({}:{}: check '{}' failed)", message, file, line, expression));
}
}  // namespace detail

}  // namespace attnsuite
