// libFuzzer target: the bench command's flag parsing, from arguments to the sweep it would run
// (cli::plan_bench: CLI11 parsing, flags → suite overlay, suite loading and merging,
// validation, output directory). Input: the arguments, separated by NUL bytes. Every input
// either gives a plan within the limits or throws CLI::ParseError or one Error(Usage).
//
// Inputs with a '/' are skipped, so that no path outside the working directory is read (no
// /dev/zero.json); plan_bench writes nothing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "commands.hpp"
#include "fuzz_support.hpp"

using namespace attnsuite;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (input.find('/') != std::string::npos) return 0;
  std::vector<std::string> args;
  std::size_t start = 0;
  while (start <= input.size()) {
    const std::size_t end = std::min(input.find('\0', start), input.size());
    args.push_back(input.substr(start, end - start));
    start = end + 1;
  }
  if (size == 0) args.clear();
  try {
    const cli::BenchPlan plan = cli::plan_bench(args);
    if (plan.spec.backends.empty()) fuzzing::finding("a plan without backends", plan.source);
    if (bench::case_count(plan.spec) > bench::kMaxCases) fuzzing::finding("a plan above the case limit", plan.source);
    if (plan.out_dir.empty()) fuzzing::finding("a plan without an output directory", plan.source);
  } catch (const CLI::ParseError&) {
  } catch (const Error& error) {
    // The user's own --suite argument is quoted as given, control characters included.
    fuzzing::expect_usage_error(error, /*one_line=*/false);
  }
  return 0;
}
