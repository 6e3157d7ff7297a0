// `attnsuite tune --kernels`: for each case of a suite and each backend that has kernel
// configurations (Backend::kernel_configs), run the case once per configuration through the
// benchmark runner (the same timing and accuracy check as `attnsuite bench`), keep the fastest
// that passed, and record it in the kernel-config cache under (device, driver, backend, shape
// class), where choose_kernel_config finds it when a plan is made.
//
// An alternative replaces the default only when it is faster by more than the noise of the two
// medians (max(2·√(σa² + σb²), 1%), `attnsuite compare`'s threshold for "the same"): a cache
// entry that flips between equals from run to run would make benchmarks irreproducible.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnsuite/kernel_configs.hpp"
#include "attnsuite/registry.hpp"
#include "bench/plan.hpp"
#include "bench/result.hpp"
#include "bench/runner.hpp"
#include "report/table.hpp"

namespace attnsuite::tune {

struct KernelCandidate {
  std::string config;
  bench::ResultRow row;  // the runner's row of the case with this configuration
  std::string excluded;  // why it ran but may not be chosen (less accurate than the built-in choice)
};

struct KernelTuneResult {
  bench::ResultRow identity;  // the case's fields
  KernelConfigKey key;
  std::vector<KernelCandidate> candidates;
  std::string best;       // the chosen configuration; empty when none ran ok
  double speedup = 1.0;   // default's median / best's median
  std::string not_tuned;  // why the case was not tuned (no configurations, unsupported, failed)
  bool interrupted = false;
};

// Whether `candidate` is faster than `reference` beyond the noise of both medians.
bool faster_beyond_noise(const bench::ResultRow& candidate, const bench::ResultRow& reference);

// Whether `candidate` is about as accurate as `reference` (the built-in choice) against the fp64
// reference: its relative L2 error at most twice the built-in's plus 1e-4, so a configuration
// that computes something else (a kernel not yet run on this GPU, say) is never cached for
// its speed. True when either error was not measured.
bool accurate_as(const bench::ResultRow& candidate, const bench::ResultRow& reference);

// Tunes one case: runs it once with each configuration. `on_row` sees every row.
KernelTuneResult tune_kernel_case(bench::Runner& runner, Registry& registry, const bench::Case& c,
                                  const std::function<bool()>& cancelled,
                                  const std::function<void(const std::string&, const bench::ResultRow&)>& on_row = {});

nlohmann::ordered_json to_json(const KernelTuneResult& result);
// Columns: backend, shape, seq len, shape class, default ms, best config, best ms, speedup, tried.
report::TextTable kernel_tuning_table(const nlohmann::json& tuning);

}  // namespace attnsuite::tune
