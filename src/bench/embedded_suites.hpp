// The suites of bench/suites/, embedded in the binary at build time (see src/CMakeLists.txt),
// so `attnsuite bench --suite NAME` works from any directory and an installed binary.
#pragma once

#include <span>
#include <string_view>

namespace attnsuite::bench {

struct EmbeddedSuite {
  std::string_view name;       // file name without extension
  std::string_view extension;  // ".json" or ".toml"
  std::string_view text;
};

std::span<const EmbeddedSuite> embedded_suites();

}  // namespace attnsuite::bench
