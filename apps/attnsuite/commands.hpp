// The subcommands of the attnsuite CLI. Each add_* registers its options on the app and returns
// the action to run when that subcommand was chosen; the action returns the exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/plan.hpp"
#include "report/shard.hpp"

namespace attnsuite::cli {

// Exit codes: 0 ok; 1 some cases failed or an error at run time; 2 bad usage; 130 interrupted.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;

using Action = std::function<int()>;

Action add_bench(CLI::App& app);
Action add_list(CLI::App& app);
Action add_info(CLI::App& app);
Action add_report(CLI::App& app);
Action add_compare(CLI::App& app);
Action add_tune(CLI::App& app);

// Without --suite: "headline" where a CUDA GPU is visible, else "default" (CPU).
std::string default_suite_name();

// The values of --causal flags (true/1/yes, false/0/no, both) as a suite's "causal" list;
// anything else is Error(Usage).
nlohmann::json causal_values(const std::vector<std::string>& flags);
Action add_export_onnx(CLI::App& app);
// attnsuite merge SHARD... --out DIR (issue 10).
Action add_merge(CLI::App& app);

// What `attnsuite bench ARGS...` would run, decided without running it.
struct BenchPlan {
  nlohmann::json suite_json;  // the suite with the flags merged in, saved as suite.json
  std::string source;         // where it came from, for error messages
  bench::SweepSpec spec;
  std::filesystem::path out_dir;
  bool resume = false, force = false, quiet = false;
  // Multi-process sweeps (docs/multi-gpu.md): this process's shard, from --shard or the
  // launcher's environment (mpirun, torchrun, Slurm); unset for an ordinary run.
  std::optional<bench::ShardInfo> shard;
  std::string gpus;  // --gpus as given (all | 0,1,...); parsed when the sweep starts
};

// Parses bench's arguments (without the program name and "bench") as the CLI does and returns
// the plan; reads at most a suite file and writes nothing. Throws CLI::ParseError for a bad flag
// and Error for a bad value. For tests and the fuzzer (tests/fuzz/fuzz_cli.cpp).
BenchPlan plan_bench(const std::vector<std::string>& args);

// Set by SIGINT/SIGTERM; polled by the sweep between and inside cases.
bool interrupt_requested();
void install_interrupt_handlers();

}  // namespace attnsuite::cli
