// The subcommands of the attnsuite CLI. Each add_* registers its options on the app and returns
// the action to run when that subcommand was chosen; the action returns the exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

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
Action add_export_onnx(CLI::App& app);

// Set by SIGINT/SIGTERM; polled by the sweep between and inside cases.
bool interrupt_requested();
void install_interrupt_handlers();

}  // namespace attnsuite::cli
