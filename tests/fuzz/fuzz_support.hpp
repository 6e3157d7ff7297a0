// What every fuzz target treats as a finding besides crashes and sanitizer reports: an
// exception that is not attnsuite::Error(Usage), or an error message that is not one line.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "attnsuite/error.hpp"

namespace attnsuite::fuzzing {

[[noreturn]] inline void finding(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "fuzz finding: %.*s: %.*s\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// Bad input must come back as one Usage error of one line.
inline void expect_usage_error(const Error& error, bool one_line = true) {
  if (error.kind() != ErrorKind::Usage) finding("error of a kind other than usage", error.what());
  const std::string_view message = error.what();
  if (message.empty()) finding("empty error message", "");
  if (one_line && message.find('\n') != std::string_view::npos) finding("error message of several lines", message);
}

}  // namespace attnsuite::fuzzing
