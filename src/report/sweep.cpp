#include "report/sweep.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>

#include "attnsuite/error.hpp"
#include "bench/gpu_workers.hpp"
#include "bench/profile.hpp"
#include "bench/runner.hpp"
#include "core/atomic_file.hpp"
#include "core/cuda_device.hpp"
#include "core/host_info.hpp"
#include "core/peak.hpp"
#include "core/peer_versions.hpp"
#include "report/jsonl.hpp"
#include "report/sinks.hpp"

namespace attnsuite::bench {

namespace fs = std::filesystem;

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &parts);
  return text;
}

namespace {

std::string git_commit() {
  // Where the source tree's git metadata is not the commit's (a copied working tree, as on the
  // GPU machine: its .git is a stale copy), the caller names the commit.
  if (const char* given = std::getenv("ATTNSUITE_GIT_COMMIT"); given != nullptr && *given != '\0') return given;
#ifdef ATTNSUITE_SOURCE_DIR
  // "<commit>-dirty" when tracked sources differ from the commit (results measured on edits).
  const std::string command = fmt::format(
      "git -C '{0}' rev-parse --short=12 HEAD 2>/dev/null | tr -d '\\n'; "
      "git -C '{0}' diff --quiet HEAD -- 2>/dev/null || printf %s -dirty",
      ATTNSUITE_SOURCE_DIR);
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[96] = {};
    const bool got = std::fgets(buffer, sizeof(buffer), pipe) != nullptr;
    pclose(pipe);
    std::string commit = got ? buffer : "";
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r')) commit.pop_back();
    if (!commit.empty() && commit.front() != '-') return commit;
  }
#endif
  return "unknown";
}

nlohmann::json settings_of(const SweepSpec& spec) {
  const auto& m = spec.timing.measure;
  return {{"cold_cache", spec.timing.cold},
          {"warmup_reps", m.warmup_reps},
          {"min_reps", m.min_reps},
          {"max_reps", m.max_reps},
          {"noise_target", m.noise_target},
          {"min_time_ms", m.min_time_ms},
          {"max_time_ms", m.max_time_ms},
          {"timeout_ms", m.timeout_ms},
          {"seed", spec.seed},
          {"reference_gflop", spec.reference_gflop}};
}

}  // namespace

RunHeader make_run_header(const SweepSpec& spec, Registry& registry, std::vector<std::string>* warnings) {
  RunHeader header;
  header.tool_version = ATTNSUITE_VERSION;
  header.git_commit = git_commit();
  header.started_at = utc_now_iso8601();
  const auto& host = host_info();
  header.hostname = host.hostname;
  header.cpu_model = host.cpu_model;
  header.cpu_threads = host.threads;
  header.simd = host.simd;
  header.suite = spec.name;
  header.settings = settings_of(spec);
  // The ceilings of each device the sweep runs on, so every row can be read as a share of them.
  const auto runs_on = [&](DeviceType type) {
    return std::any_of(spec.backends.begin(), spec.backends.end(), [&](const std::string& name) {
      return registry.contains(name) && registry.find(name).device().type == type;
    });
  };
  if (runs_on(DeviceType::Cpu)) {
    header.cpu_fp32_peak_gflops = cpu::measure_fp32_fma_peak_gflops();
    header.ceilings.cpu_fp32_gflops = header.cpu_fp32_peak_gflops;
    header.ceilings.host_copy_gbps = cpu::measure_host_copy_gbps();
    header.ceilings.cpu_dispatch_us = cpu::measure_dispatch_us();
  }
#if ATTNSUITE_HAVE_CUDA
  if (cuda::cuda_device_count() > 0) {
    const cuda::CudaDeviceInfo info = cuda::query_cuda_device(0);
    header.gpu_name = info.name;
    header.gpu_driver = info.driver_version;
    header.cuda_version = fmt::format("{}.{}", info.runtime_version / 1000, info.runtime_version % 1000 / 10);
    if (runs_on(DeviceType::Cuda)) {
      try {
        const DeviceCeilings gpu = cuda::measure_gpu_ceilings(0);
        header.ceilings.gpu_copy_gbps = gpu.gpu_copy_gbps;
        header.ceilings.gpu_fp16_tflops = gpu.gpu_fp16_tflops;
        header.ceilings.gpu_bf16_tflops = gpu.gpu_bf16_tflops;
        header.ceilings.gpu_fp8_tflops = gpu.gpu_fp8_tflops;
        header.ceilings.gpu_launch_us = gpu.gpu_launch_us;
        header.ceilings.gpu_gemm_shape = gpu.gpu_gemm_shape;
      } catch (const Error& error) {
        if (warnings) warnings->push_back(fmt::format("GPU ceilings not measured: {}", error.what()));
      }
    }
  }
#else
  (void)warnings;
#endif
#if ATTNSUITE_HAVE_PEERS
  const peers::PeerVersions versions = peers::peer_versions();
  // The cuDNN this build links, recorded only where a GPU runs it (the report showed cuDNN 9.19
  // for a run on a host without a GPU).
  if (!header.gpu_name.empty()) header.cudnn_version = versions.cudnn;
  header.torch_version = versions.torch;
#endif
  return header;
}

namespace {

// What the sweep does as each case starts and as its row comes back, serial or on --gpus: the
// row is profiled, appended to the JSONL and kept, and the progress callback is told, with an
// ETA from the pace since this was made.
class Progress {
 public:
  Progress(const SweepOptions& options, report::JsonlWriter& writer, SweepOutcome& outcome, SweepProgress& progress,
           std::size_t todo)
      : options_(options), writer_(writer), outcome_(outcome), progress_(progress), todo_(todo) {}

  void started(const Case* c) {
    progress_.current = c;
    progress_.finished = nullptr;
    if (options_.on_progress) options_.on_progress(progress_);
  }

  void finished(ResultRow row) {
    apply_profile(row, outcome_.header.ceilings);
    writer_.append(row);
    outcome_.rows.push_back(std::move(row));
    ++ran_;
    ++progress_.done;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    progress_.eta_seconds = elapsed / static_cast<double>(ran_) * static_cast<double>(todo_ - ran_);
    progress_.current = nullptr;
    progress_.finished = &outcome_.rows.back();
    if (options_.on_progress) options_.on_progress(progress_);
  }

 private:
  const SweepOptions& options_;
  report::JsonlWriter& writer_;
  SweepOutcome& outcome_;
  SweepProgress& progress_;
  const std::size_t todo_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::size_t ran_ = 0;
};

// --- bench --gpus (issue 10) ---------------------------------------------------------------------

// The todo cases on one worker per GPU (bench/gpu_workers.hpp); rows are appended to the JSONL as
// they finish (for --resume) and, at the end, all rows (resumed ones too) are put in the plan's
// order and the JSONL is rewritten in that order.
void run_sweep_on_gpus(const SweepSpec& spec, const SweepOptions& options, Registry& registry,
                       const std::vector<Case>& cases, const std::vector<const Case*>& todo,
                       const std::vector<std::size_t>& todo_index, SweepOutcome& outcome, Progress& progress) {
  std::vector<IndexedCase> work;
  for (std::size_t n = 0; n < todo.size(); ++n) work.push_back({todo_index[n], todo[n]});
  GpuWorkCallbacks callbacks;
  callbacks.cancelled = options.cancelled;
  callbacks.on_start = [&](const IndexedCase& item, int) { progress.started(item.c); };
  callbacks.on_row = [&](const IndexedCase&, int, ResultRow row) { progress.finished(std::move(row)); };
  outcome.interrupted = run_on_gpus(spec, options.gpus, work, registry, callbacks);

  // The plan's order: by the index of each row's case (a case listed twice fills its slots in turn).
  std::map<std::string, std::vector<std::size_t>> index_of;
  for (std::size_t i = 0; i < cases.size(); ++i) index_of[row_for_case(cases[i], nullptr).case_key()].push_back(i);
  std::vector<std::pair<std::size_t, std::size_t>> order;  // (plan index, row)
  std::map<std::string, std::size_t> used;
  for (std::size_t r = 0; r < outcome.rows.size(); ++r) {
    const std::string key = outcome.rows[r].case_key();
    const auto& slots = index_of[key];
    const std::size_t n = used[key]++;
    order.emplace_back(n < slots.size() ? slots[n] : cases.size() + r, r);
  }
  std::sort(order.begin(), order.end());
  std::vector<ResultRow> sorted;
  sorted.reserve(outcome.rows.size());
  for (const auto& [index, r] : order) sorted.push_back(std::move(outcome.rows[r]));
  outcome.rows = std::move(sorted);
  std::string jsonl = nlohmann::json{{"header", to_json(outcome.header)}}.dump() + "\n";
  for (const ResultRow& row : outcome.rows) jsonl += to_ordered_json(row).dump() + "\n";
  report::write_file_atomic(options.out_dir / kRowsFile, jsonl);
}

}  // namespace

SweepOutcome run_sweep(const SweepSpec& spec, const SweepOptions& options_in, Registry& registry) {
  // A shard writes into a folder of its own inside --out (shard-<rank>-of-<world>).
  SweepOptions options = options_in;
  if (options.shard) options.out_dir /= shard_dir_name(*options.shard);
  SweepOutcome outcome;
  outcome.out_dir = options.out_dir;
  outcome.header = make_run_header(spec, registry, &outcome.warnings);
  try {
    report::ensure_writable_directory(options.out_dir);
  } catch (const Error& error) {  // the user's choice of directory: a usage error (exit 2)
    throw Error(ErrorKind::Usage, fmt::format("output directory: {}", error.what()));
  }

  // Results are never overwritten without force: any results file counts, not only the JSONL
  // (a directory that holds a results.json from elsewhere is not a fresh output directory).
  const fs::path rows_path = options.out_dir / kRowsFile;
  const bool has_rows = fs::exists(rows_path) && fs::file_size(rows_path) > 0;
  std::vector<std::string> existing;
  if (has_rows) existing.emplace_back(kRowsFile);
  for (const char* name : {kCsvFile, kJsonFile, kMarkdownFile})
    if (fs::exists(options.out_dir / name)) existing.emplace_back(name);
  if (!existing.empty() && !options.resume && !options.force)
    throw Error(ErrorKind::Usage,
                fmt::format("output directory '{}' already holds results ({}); use --resume to finish that sweep "
                            "or --force to overwrite it",
                            options.out_dir.string(), fmt::join(existing, ", ")));
  if (options.force && !options.resume) {
    for (const char* name : {kRowsFile, kCsvFile, kJsonFile, kMarkdownFile}) fs::remove(options.out_dir / name);
  }
  // Temporary files of a run killed inside write_file_atomic (".results.json.tmp-PID-N").
  for (const auto& entry : fs::directory_iterator(options.out_dir)) {
    const std::string name = entry.path().filename().string();
    for (const char* file : {kRowsFile, kCsvFile, kJsonFile, kMarkdownFile, kSuiteFile})
      if (name.rfind(fmt::format(".{}.tmp-", file), 0) == 0) fs::remove(entry.path());
  }

  std::set<std::string> finished;
  if (options.resume && fs::exists(rows_path)) {
    // A torn last line (the interrupted write) is skipped here and cut off by JsonlWriter.
    try {
      outcome.rows = report::read_jsonl(rows_path, &outcome.warnings);
    } catch (const Error& error) {  // the results of the sweep to finish are damaged: bad input (exit 2)
      if (error.kind() != ErrorKind::Io) throw;
      throw Error(ErrorKind::Usage, fmt::format("--resume: {}", error.what()));
    }
    for (const auto& row : outcome.rows) finished.insert(row.case_key());
    outcome.resumed = outcome.rows.size();
  }
  if (!options.suite_json.is_null())
    report::write_file_atomic(options.out_dir / kSuiteFile,
                              options.suite_json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");

  const std::vector<Case> cases = expand(spec);
  std::vector<const Case*> todo;
  std::vector<std::size_t> todo_index;  // each todo case's index in the plan
  std::size_t planned = 0;              // the cases of this process (its shard's, or all)
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (options.shard && !shard_owns(*options.shard, i)) continue;
    ++planned;
    if (!finished.contains(row_for_case(cases[i], nullptr).case_key())) {
      todo.push_back(&cases[i]);
      todo_index.push_back(i);
    }
  }
  if (options.shard) {
    const nlohmann::json meta = {{"rank", options.shard->rank},
                                 {"world", options.shard->world},
                                 {"plan", plan_fingerprint(cases)},
                                 {"cases", planned},
                                 {"source", options.shard->source}};
    report::write_file_atomic(options.out_dir / kShardFile, meta.dump(2) + "\n");
  }

  report::JsonlWriter writer(rows_path);
  // A new (or --force-cleared) file starts with the run header, so the JSONL describes itself.
  if (!(has_rows && options.resume)) writer.append_header(outcome.header);
  SweepProgress counts;
  counts.total = planned;
  counts.done = planned - todo.size();
  Progress progress(options, writer, outcome, counts, todo.size());
  if (!options.gpus.empty()) {
    run_sweep_on_gpus(spec, options, registry, cases, todo, todo_index, outcome, progress);
  } else {
    Runner runner(spec, registry);
    const bool has_cuda_backend = std::any_of(spec.backends.begin(), spec.backends.end(), [&](const std::string& name) {
      return registry.contains(name) && registry.find(name).device().type == DeviceType::Cuda;
    });
    if (options.cuda_device >= 0 && has_cuda_backend) runner.use_cuda_device(options.cuda_device);
    for (const Case* c : todo) {
      if (options.cancelled && options.cancelled()) {
        outcome.interrupted = true;
        break;
      }
      progress.started(c);
      std::optional<ResultRow> row = runner.run(*c, options.cancelled);
      if (!row) {
        outcome.interrupted = true;
        break;
      }
      progress.finished(std::move(*row));
    }
  }  // serial

  outcome.header.finished_at = utc_now_iso8601();
  outcome.header.interrupted = outcome.interrupted;
  report::fill_relative_to_vanilla(outcome.rows);
  report::write_file_atomic(options.out_dir / kCsvFile, report::to_csv(outcome.rows));
  report::write_file_atomic(options.out_dir / kJsonFile,
                            report::to_results_json(outcome.header, outcome.rows).dump(2) + "\n");
  report::write_file_atomic(options.out_dir / kMarkdownFile, report::summary_markdown(outcome.rows));
  return outcome;
}

}  // namespace attnsuite::bench
