// attnsuite: attention kernels and the harness that measures them side by side.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "attnsuite/error.hpp"
#include "attnsuite/registry.hpp"
#include "commands.hpp"
#include "core/isa.hpp"
#include "fault/fault.hpp"

#if ATTNSUITE_HAVE_ONNXRUNTIME_PEER
#include "peers/onnxruntime/onnxruntime_peer.hpp"
#endif

int main(int argc, char** argv) {
  using namespace attnsuite;
  CLI::App app{"attnsuite: attention kernels and a harness that measures them side by side", "attnsuite"};
  app.set_version_flag("--version", ATTNSUITE_VERSION);
  app.require_subcommand(0, 1);

  std::vector<std::pair<CLI::App*, cli::Action>> commands;
  auto add = [&](const char* name, const char* help, cli::Action (*make)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, help);
    commands.emplace_back(sub, make(*sub));
  };
  add("bench", "Run a benchmark sweep (no arguments: the default suite)", cli::add_bench);
  add("list", "List the backends and what each supports here", cli::add_list);
  add("info", "Show the machine: CPU, SIMD, fp32 peak, GPU, library versions", cli::add_info);
  add("report", "Re-render a results file (.json, .jsonl or .csv) as tables", cli::add_report);
  add("merge", "Join the shards of a sweep run over several processes (mpirun, torchrun, Slurm) into one result",
      cli::add_merge);
  add("compare", "Compare two results files case by case (A = baseline, B = new)", cli::add_compare);
  add("tune", "Find the batch size of highest throughput under memory and p95 limits (--batch)", cli::add_tune);
  add("export-onnx",
      "Write an attention layer or block as ONNX (Attention op and MatMul/Softmax graph), "
      "checked against the reference (runs the Python package; --help for its options)",
      cli::add_export_onnx);

#if ATTNSUITE_HAVE_ONNXRUNTIME_PEER
  // Peers outside the library (they embed Python), added after the built-in backends.
  onnxruntime::register_onnxruntime_backends(Registry::global());
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "attnsuite: error: {}\n", e.what());
    return cli::kExitUsage;
  }

  try {
    fault::arm_from_environment();  // test-only: ATTNSUITE_FAULT=alloc:N|cuda:N (src/fault/fault.hpp)
    (void)cpu::selected_cpu_isa();  // a bad ATTNSUITE_CPU_ISA is one error line before any work
    for (auto& [sub, action] : commands)
      if (sub->parsed()) return action();
    fmt::print(stderr, "{}", app.help());
    return cli::kExitUsage;
  } catch (const Error& error) {
    if (error.kind() == ErrorKind::Cancelled) {
      fmt::print(stderr, "attnsuite: interrupted\n");
      return cli::interrupt_exit_code();
    }
    fmt::print(stderr, "attnsuite: error: {}\n", error.what());
    return error.kind() == ErrorKind::Usage ? cli::kExitUsage : cli::kExitFailed;
  } catch (const std::exception& error) {
    fmt::print(stderr, "attnsuite: error: {}\n", error.what());
    return cli::kExitFailed;
  }
  return cli::kExitOk;
}
