// libFuzzer target: the suite-file parser (src/bench/plan.*). Input: one byte that picks the
// format (even: JSON, odd: TOML), then the file's text. Whatever the text, parsing, validating
// and expanding it either succeed or throw one Error(Usage) of one line; the cases it expands
// to are as many as case_count() says, and every case without an invalid_reason is a problem
// that validates. The same text is also merged over the default suite, as the CLI merges flags.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/plan.hpp"
#include "fuzz_support.hpp"

using namespace attnsuite;

namespace {

// Expanding a million cases takes a second; the count alone is checked above this.
constexpr std::uint64_t kExpandAtMost = 20000;

void check_spec(const bench::SweepSpec& spec) {
  const std::uint64_t count = bench::case_count(spec);
  if (count > bench::kMaxCases) fuzzing::finding("parse_suite accepted too many cases", std::to_string(count));
  if (count > kExpandAtMost) return;
  const auto cases = bench::expand(spec);
  if (cases.size() != count) fuzzing::finding("case_count disagrees with expand", std::to_string(count));
  for (const auto& c : cases) {
    if (!c.invalid_reason.empty()) continue;
    try {
      c.problem.validate();
    } catch (const Error& error) {
      fuzzing::finding("a valid case does not validate", error.what());
    }
  }
}

void parse_and_check(const nlohmann::json& suite) {
  try {
    check_spec(bench::parse_suite(suite, "fuzz"));
  } catch (const Error& error) {
    fuzzing::expect_usage_error(error);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string extension = (data[0] & 1) != 0 ? ".toml" : ".json";
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  nlohmann::json suite;
  try {
    suite = bench::parse_suite_text(text, extension, "fuzz");
  } catch (const Error& error) {
    fuzzing::expect_usage_error(error);
    return 0;
  }
  parse_and_check(suite);
  // As flags over a suite: the CLI's merge_suite path.
  if (suite.is_object()) {
    try {
      parse_and_check(bench::merge_suite(bench::load_suite_json("default"), suite));
    } catch (const Error& error) {
      fuzzing::expect_usage_error(error);
    }
  }
  return 0;
}
