// The subcommands of the attnsuite CLI. Each add_* registers its options on the app and returns
// the action to run when that subcommand was chosen; the action returns the exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/plan.hpp"
#include "report/shard.hpp"

namespace attnsuite::cli {

// Exit codes, the same for every command (README.md, "Exit codes"):
//   0  ok: the command did what was asked (a sweep ran at least one case, none failed)
//   1  a case failed (recorded; the sweep goes on), or an error at run time (a device, a write)
//   2  bad usage: a flag, value, suite or input file that is not allowed (one line: the value and
//      what is allowed)
//   3  nothing ran: every case was skipped (its reason is in the results), or nothing was tuned
//      or compared
//   130, 143  interrupted by SIGINT, SIGTERM (128 + the signal): the finished cases are saved
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNothingRan = 3;
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT; interrupt_exit_code() says which signal

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
  std::string gpus;    // --gpus as given (all | 0,1,...); parsed when the sweep starts
  std::string notice;  // a line for stderr before the sweep starts (--resume that starts a sweep)
};

// Parses bench's arguments (without the program name and "bench") as the CLI does and returns
// the plan; reads at most a suite file and writes nothing. Throws CLI::ParseError for a bad flag
// and Error for a bad value. For tests and the fuzzer (tests/fuzz/fuzz_cli.cpp).
BenchPlan plan_bench(const std::vector<std::string>& args);

// Set by SIGINT/SIGTERM; polled by the sweep between and inside cases.
bool interrupt_requested();
void install_interrupt_handlers();
// 128 + the signal that interrupted the command: 130 (SIGINT), 143 (SIGTERM).
int interrupt_exit_code();

// The exit code of a finished run: interrupted, else a failure, else nothing ran, else ok.
int run_exit_code(bool interrupted, bool failed, bool nothing_ran);

}  // namespace attnsuite::cli
