#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <optional>

#include "attnsuite/error.hpp"
#include "attnsuite/registry.hpp"
#include "bench/gpu_workers.hpp"
#include "commands.hpp"
#include "core/cancel.hpp"
#include "report/shard.hpp"
#include "report/sinks.hpp"
#include "report/sweep.hpp"

#if ATTNSUITE_HAVE_CUDA
#include "cuda/cuda_backends.hpp"
#endif

namespace attnsuite::cli {

nlohmann::json causal_values(const std::vector<std::string>& flags) {
  nlohmann::json values = nlohmann::json::array();
  for (const auto& c : flags) {
    if (c == "both") {
      values.push_back(false);
      values.push_back(true);
    } else if (c == "true" || c == "1" || c == "yes") {
      values.push_back(true);
    } else if (c == "false" || c == "0" || c == "no") {
      values.push_back(false);
    } else {
      throw Error(ErrorKind::Usage, fmt::format("--causal {} is not allowed: true, false or both", c));
    }
  }
  return values;
}

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};  // the first signal that interrupted the command

extern "C" void on_interrupt(int signal_number) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal_number);
  g_interrupted.store(true);
  request_cancel();  // the loops inside the case in progress stop too (core/cancel.hpp)
  // A second signal ends the process at once, with the default action.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

struct BenchFlags {
  std::string suite;  // empty: "headline" where a CUDA GPU is visible, else "default" (CPU)
  std::vector<std::string> backends, dtypes, models, generators, causal, passes;
  std::vector<int> batches, seqs, seq_kvs, heads, kv_heads, head_dims, window;
  std::optional<int> tokens, min_reps, max_reps, warmup;
  std::optional<std::int64_t> seed;
  std::optional<double> noise, max_time_ms, reference_gflop;
  std::optional<std::string> layout;
  std::optional<std::string> sparse_config, block_mask;
  std::vector<std::string> kernel_configs;   // BACKEND=CONFIG
  std::vector<std::string> backend_options;  // KEY=VALUE
  bool hot = false;
  std::string out;
  bool resume = false, force = false, quiet = false;
  std::string gpus, shard;  // multi-GPU / multi-process (issue 10)
};

// "KEY=VALUE" flags as pairs; anything else is a usage error naming the flag and the form.
std::vector<std::pair<std::string, std::string>> key_values(const std::vector<std::string>& flags, const char* flag,
                                                            const char* form) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& text : flags) {
    const std::size_t equals = text.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == text.size())
      throw Error(ErrorKind::Usage, fmt::format("{} {} is not allowed: the form is {}", flag, text, form));
    pairs.emplace_back(text.substr(0, equals), text.substr(equals + 1));
  }
  return pairs;
}

// The flags as a suite overlay, so that flags and suite files go through one validator.
nlohmann::json overrides_from(const BenchFlags& f) {
  nlohmann::json o = nlohmann::json::object();
  if (!f.backends.empty()) o["backends"] = f.backends;
  if (!f.dtypes.empty()) o["dtype"] = f.dtypes;
  if (!f.batches.empty()) o["batch"] = f.batches;
  if (f.tokens) o["tokens_per_batch"] = *f.tokens;
  if (!f.seqs.empty()) o["seq"] = f.seqs;
  if (!f.seq_kvs.empty()) o["seq_kv"] = f.seq_kvs;
  if (!f.models.empty()) o["model"] = f.models;
  if (!f.heads.empty()) o["heads"] = f.heads;
  if (!f.kv_heads.empty()) o["kv_heads"] = f.kv_heads;
  if (!f.head_dims.empty()) o["head_dim"] = f.head_dims;
  if (!f.causal.empty()) o["causal"] = causal_values(f.causal);
  if (!f.passes.empty()) o["pass"] = f.passes;
  if (!f.generators.empty()) o["generator"] = f.generators;
  if (f.layout) o["layout"] = *f.layout;
  if (!f.window.empty()) o["window"] = f.window;
  if (f.seed) o["seed"] = *f.seed;
  if (f.min_reps) o["timing"]["min_reps"] = *f.min_reps;
  if (f.max_reps) o["timing"]["max_reps"] = *f.max_reps;
  if (f.warmup) o["timing"]["warmup"] = *f.warmup;
  if (f.noise) o["timing"]["noise"] = *f.noise;
  if (f.max_time_ms) o["timing"]["max_time_ms"] = *f.max_time_ms;
  if (f.hot) o["timing"]["cold"] = false;
  if (f.reference_gflop) o["accuracy"]["reference_gflop"] = *f.reference_gflop;
  if (f.sparse_config) o["backend_options"]["sparse_config"] = *f.sparse_config;
  if (f.block_mask) o["backend_options"]["block_mask"] = *f.block_mask;
  for (const auto& [key, value] : key_values(f.backend_options, "--backend-option", "KEY=VALUE"))
    o["backend_options"][key] = value;
  for (const auto& [backend, config] : key_values(f.kernel_configs, "--kernel-config", "BACKEND=CONFIG"))
    o["kernel_config"][backend] = config;
  return o;
}

std::string format_duration(double seconds) {
  const long total = static_cast<long>(seconds + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

std::string describe_case(const bench::Case& c) { return fmt::format("{} {}", c.backend, c.problem.describe()); }

class Progress {
 public:
  Progress(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() { clear(); }

  void update(const bench::SweepProgress& p) {
    if (quiet_) return;
    if (tty_) {
      const int width = 24;
      const int filled = p.total ? static_cast<int>(width * p.done / p.total) : width;
      const std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
      const std::string eta = p.eta_seconds >= 0 ? "ETA " + format_duration(p.eta_seconds) : "ETA --:--";
      const std::string what = p.current ? describe_case(*p.current) : "";
      std::string line = fmt::format("\r[{}] {}/{} {} {}", bar, p.done, p.total, eta, what);
      if (line.size() > 118) line.resize(118);
      fmt::print(stderr, "{}\x1b[K", line);
      dirty_ = true;
    } else if (p.finished != nullptr) {
      const auto& r = *p.finished;
      std::string result = r.status == bench::CaseStatus::Ok && r.ms_median
                               ? fmt::format("{:.4g} ms", *r.ms_median)
                               : fmt::format("{}: {}", bench::to_string(r.status), r.reason);
      fmt::print(stderr, "[{}/{}] {} {}: {}\n", p.done, p.total, r.backend, report::shape_summary(r), result);
    }
  }
  void clear() {
    if (dirty_) fmt::print(stderr, "\r\x1b[K");
    dirty_ = false;
  }

 private:
  bool quiet_, tty_, dirty_ = false;
};

void add_bench_flags(CLI::App& app, BenchFlags* f) {
  app.add_option("--suite", f->suite,
                 "Suite name (bench/suites/NAME) or a .json/.toml file (default: headline with a GPU, else default)");
  app.add_option("-b,--backends", f->backends, "Backends to run (comma-separated; see `attnsuite list`)")
      ->delimiter(',');
  app.add_option("--dtype", f->dtypes,
                 "fp32, fp16, bf16, e4m3 (comma-separated; e4m3: FP8 inputs with a per-tensor scale, bf16 out)")
      ->delimiter(',');
  app.add_option("--batch", f->batches, "Batch sizes")->delimiter(',');
  app.add_option(
      "--tokens", f->tokens,
      "Tokens per batch: batch = tokens / seq, rounded down (overrides --batch; at least the longest --seq)");
  app.add_option("--seq", f->seqs, "Sequence lengths (queries; keys too unless --seq-kv)")->delimiter(',');
  app.add_option("--seq-kv", f->seq_kvs, "Key/value sequence lengths")->delimiter(',');
  app.add_option("--model", f->models, "Model presets that set the head axes (see `attnsuite list`)")->delimiter(',');
  app.add_option("--heads", f->heads, "Query heads")->delimiter(',');
  app.add_option("--kv-heads", f->kv_heads, "Key/value heads (GQA/MQA; default = --heads)")->delimiter(',');
  app.add_option("--head-dim", f->head_dims, "Head dims")->delimiter(',');
  app.add_option("--causal", f->causal, "true, false or both")->delimiter(',');
  app.add_option("--pass", f->passes, "fwd, bwd, fwd+bwd (comma-separated; bwd times the backward alone)")
      ->delimiter(',');
  app.add_option(
         "--generator", f->generators,
         "Input generators (randn, uniform, banded, clustered, sinks, npy:DIR, safetensors:FILE; docs/generators.md)")
      ->delimiter(',');
  app.add_option("--layout", f->layout, "bshd or bhsd");
  app.add_option("--sparse-config", f->sparse_config,
                 "Tuned sparse config for sparge/sparge-sage/cpu-sparge (tune --sparse writes it)");
  app.add_option("--block-mask", f->block_mask,
                 "Block mask for block-sparse/cpu-block-sparse: band:W, random:P, file:PATH");
  app.add_option("--kernel-config", f->kernel_configs,
                 "Kernel config to run, per backend: BACKEND=CONFIG (comma-separated; a wrong name is an error listing "
                 "the allowed ones; default: the kernel-config cache, else the built-in rule)")
      ->delimiter(',');
  app.add_option("--backend-option", f->backend_options,
                 "A backend option KEY=VALUE (repeatable; the README's bench section lists the keys)");
  app.add_option("--window", f->window, "Sliding window LEFT,RIGHT (-1 = unbounded)")->delimiter(',')->expected(2);
  app.add_option("--seed", f->seed, "Input seed");
  app.add_option("--noise", f->noise, "Stop repeating when the median's relative error is under this (0.01 = 1%)");
  app.add_option("--min-reps", f->min_reps, "Fewest measured repetitions");
  app.add_option("--max-reps", f->max_reps, "Most measured repetitions");
  app.add_option("--warmup", f->warmup, "Warm-up runs");
  app.add_option("--max-time-ms", f->max_time_ms, "Time budget per case for the measured repetitions");
  app.add_option("--reference-gflop", f->reference_gflop,
                 "Max GFLOP of fp64 reference per shape (else heads are sampled)");
  app.add_flag("--hot", f->hot, "Keep caches warm between samples (default: flush the last-level cache)");
  app.add_option("-o,--out", f->out, "Output directory (default: results/<suite>-<time>)");
  app.add_flag("--resume", f->resume, "Finish an interrupted sweep in --out, skipping finished cases");
  app.add_flag("--force", f->force, "Overwrite results already in --out");
  app.add_flag("-q,--quiet", f->quiet, "No progress and no table: the one-line summary (and errors) only");
  app.add_option("--gpus", f->gpus,
                 "Run on several GPUs: all, or indices 0,1,... (one worker per GPU, one merged result)");
  app.add_option("--shard", f->shard,
                 "This process's part of a sweep split over processes, RANK/WORLD (default: from mpirun, torchrun or "
                 "Slurm variables); writes OUT/shard-RANK-of-WORLD for `attnsuite merge`");
}

// The flag → plan path: everything the bench command decides before it runs a case.
BenchPlan make_bench_plan(const BenchFlags& f) {
  const std::string suite = f.suite.empty() ? default_suite_name() : f.suite;
  BenchPlan plan;
  nlohmann::json overrides = overrides_from(f);
  plan.source = suite;
  // A shard (--shard, or the launcher's environment; world size 1 is an ordinary run).
  if (!f.shard.empty()) {
    plan.shard = bench::parse_shard(f.shard);
  } else if (auto from_env = bench::shard_from_environment(); from_env && from_env->world > 1) {
    plan.shard = std::move(from_env);
  }
  if (plan.shard && f.out.empty())
    throw Error(ErrorKind::Usage,
                fmt::format("a sharded run ({}: rank {} of {}) needs --out DIR, the same folder for every process",
                            plan.shard->source, plan.shard->rank, plan.shard->world));
  plan.gpus = f.gpus;
  const std::filesystem::path out_folder =
      plan.shard ? std::filesystem::path(f.out) / bench::shard_dir_name(*plan.shard) : std::filesystem::path(f.out);
  const std::filesystem::path saved = f.out.empty() ? std::filesystem::path() : out_folder / bench::kSuiteFile;
  std::error_code missing;  // an unusable --out (too long a name, ...) is reported by the sweep
  if (f.resume && !f.out.empty() && std::filesystem::exists(saved, missing)) {
    // Resuming: the sweep's own saved suite, with any flags given now on top.
    plan.suite_json = bench::load_suite_json(saved.string());
    plan.source = saved.string();
  } else {
    if (f.resume && f.out.empty())
      throw Error(ErrorKind::Usage, "--resume needs --out DIR: the directory of the sweep to finish");
    if (f.resume) {
      // Nothing to finish there (a typo, or a run stopped before it saved its suite): a command
      // that names what to run starts it (so the same command can be repeated until the sweep is
      // done); one that does not is refused rather than starting the whole default suite.
      if (f.suite.empty() && f.backends.empty())
        throw Error(ErrorKind::Usage,
                    fmt::format("--resume: '{}' holds no sweep to finish (no {}); check the path, or give --suite or "
                                "--backends to start a sweep there",
                                out_folder.string(), bench::kSuiteFile));
      plan.notice =
          fmt::format("'{}' holds no sweep to finish (no {}): starting it", out_folder.string(), bench::kSuiteFile);
    }
    plan.suite_json = bench::load_suite_json(suite);
  }
  if (!overrides.empty()) {
    const bool fresh_default = f.suite.empty() && plan.source == suite;  // not a named suite, nor a resumed one
    plan.suite_json = bench::merge_suite(std::move(plan.suite_json), overrides);
    if (fresh_default)
      bench::name_custom_sweep(plan.suite_json, overrides, fmt::format("flags over the {} suite", suite));
    plan.source += " + flags";
  }
  plan.spec = bench::parse_suite(plan.suite_json, plan.source);
  Registry& registry = Registry::global();
  for (const auto& name : plan.spec.backends) (void)registry.find(name);  // unknown names fail before the sweep

  if (f.out.empty()) {
    std::string dir = (std::filesystem::path("results") /
                       fmt::format("{}-{}", plan.spec.name, bench::utc_now_iso8601().substr(0, 19)))
                          .string();
    std::replace(dir.begin(), dir.end(), ':', '-');
    plan.out_dir = dir;
  } else {
    plan.out_dir = f.out;
  }
  plan.resume = f.resume;
  plan.force = f.force;
  plan.quiet = f.quiet;
  return plan;
}

}  // namespace

// Without --suite: the GPU headline table where a CUDA GPU is visible, else the CPU suite.
std::string default_suite_name() {
#if ATTNSUITE_HAVE_CUDA
  if (cuda::cuda_device_count() > 0) return "headline";
#endif
  return "default";
}

bool interrupt_requested() { return g_interrupted.load(); }

int interrupt_exit_code() {
  const int signal_number = g_signal.load();
  return signal_number > 0 ? 128 + signal_number : kExitInterrupted;
}

int run_exit_code(bool interrupted, bool failed, bool nothing_ran) {
  if (interrupted) return interrupt_exit_code();
  if (failed) return kExitFailed;
  return nothing_ran ? kExitNothingRan : kExitOk;
}

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

BenchPlan plan_bench(const std::vector<std::string>& args) {
  CLI::App app{"attnsuite bench", "bench"};
  BenchFlags flags;
  add_bench_flags(app, &flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  app.parse(reversed);
  return make_bench_plan(flags);
}

Action add_bench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  add_bench_flags(app, f.get());
  return [f]() -> int {
    // First, so that a signal during start-up (suite loading, the CPU peak measurement) also
    // ends the sweep cleanly, with its files and exit code 130.
    install_interrupt_handlers();
    const BenchPlan plan = make_bench_plan(*f);
    Registry& registry = Registry::global();
    const bench::SweepSpec& spec = plan.spec;

    bench::SweepOptions options;
    options.out_dir = plan.out_dir;
    options.resume = plan.resume;
    options.force = plan.force;
    options.suite_json = plan.suite_json;
    options.cancelled = interrupt_requested;
    options.shard = plan.shard;
    if (!plan.gpus.empty()) options.gpus = bench::parse_gpu_list(plan.gpus);
#if ATTNSUITE_HAVE_CUDA
    // A process of a multi-process launch runs on its local rank's GPU.
    if (plan.shard && plan.shard->local_rank >= 0 && options.gpus.empty() && cuda::cuda_device_count() > 0)
      options.cuda_device = plan.shard->local_rank % cuda::cuda_device_count();
#endif
    if (!plan.notice.empty()) fmt::print(stderr, "attnsuite: note: {}\n", plan.notice);
    if (plan.shard && !plan.quiet)
      fmt::print(stderr, "attnsuite: shard {} of {} ({}), writing {}/{}\n", plan.shard->rank, plan.shard->world,
                 plan.shard->source, plan.out_dir.string(), bench::shard_dir_name(*plan.shard));
    Progress progress(plan.quiet);
    options.on_progress = [&](const bench::SweepProgress& p) { progress.update(p); };

    const bench::SweepOutcome outcome = bench::run_sweep(spec, options, registry);
    progress.clear();
    for (const auto& warning : outcome.warnings) fmt::print(stderr, "attnsuite: warning: {}\n", warning);

    std::size_t failed = 0, skipped = 0;
    for (const auto& row : outcome.rows) {
      failed += row.status == bench::CaseStatus::Failed;
      skipped += row.status == bench::CaseStatus::Skipped;
    }
    if (!plan.quiet) fmt::print("{}\n", report::summary_terminal(outcome.rows));
    fmt::print("{} cases: {} ok, {} skipped, {} failed{}. Results in {}/ ({}, {}, {}, {})\n", outcome.rows.size(),
               outcome.rows.size() - failed - skipped, skipped, failed,
               outcome.resumed ? fmt::format(" ({} resumed)", outcome.resumed) : "", outcome.out_dir.string(),
               bench::kCsvFile, bench::kJsonFile, bench::kMarkdownFile, bench::kRowsFile);
    if (outcome.interrupted) {
      fmt::print(stderr, "attnsuite: interrupted; finish with: attnsuite bench --resume --out {}{}\n",
                 plan.out_dir.string(), plan.shard ? " (under the same rank)" : "");
    }
    // Every case skipped: nothing was measured, which a script must not take for success.
    const bool nothing_ran = !outcome.rows.empty() && skipped == outcome.rows.size();
    if (nothing_ran && !outcome.interrupted)
      fmt::print(stderr, "attnsuite: nothing ran: every case was skipped ({}){}\n", outcome.rows.front().reason,
                 outcome.rows.size() > 1 ? "; the reasons are in the table and results" : "");
    return run_exit_code(outcome.interrupted, failed > 0, nothing_ran);
  };
}

}  // namespace attnsuite::cli
