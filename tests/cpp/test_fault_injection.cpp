// Fault injection in the middle of a sweep (src/fault/fault.hpp): the n-th host allocation — or, on
// a GPU, the n-th checked CUDA call — fails. For every n tried, the case it falls in is
// recorded as failed with the reason, every other case runs as in a clean sweep, the files are
// valid, and the memory tracker is back at its baseline (nothing leaked).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>

#include "attnsuite/attnsuite.hpp"
#include "fault/fault.hpp"
#include "gpu_test_support.hpp"
#include "report/jsonl.hpp"
#include "report/load.hpp"
#include "report/sweep.hpp"

namespace fs = std::filesystem;

namespace attnsuite {
namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attnsuite_fault_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

// Fixed repetitions, so that a sweep makes the same allocations and calls every time.
bench::SweepSpec fixed_spec(std::vector<std::string> backends, DType dtype, int head_dim) {
  bench::SweepSpec spec;
  spec.name = "fault";
  spec.backends = std::move(backends);
  spec.dtypes = {dtype};
  spec.batches = {1, 2};
  spec.seq_q = {33, 64};
  spec.heads = {{2, 2, head_dim, ""}};
  spec.causal = {false, true};
  spec.timing.cold = false;
  spec.timing.measure.warmup_reps = 1;
  spec.timing.measure.min_reps = 2;
  spec.timing.measure.max_reps = 2;
  return spec;
}

struct FaultRun {
  bench::SweepOutcome outcome;
  std::uint64_t events = 0;  // at the site, from the first case on
  std::uint64_t injected = 0;
};

// Runs the sweep with the site armed as its first case starts (so the n-th event is one of
// the cases', never the run header's); nth = 0 arms nothing and only counts.
FaultRun sweep_with_fault(const bench::SweepSpec& spec, const fs::path& out, fault::Site site, std::uint64_t nth) {
  bench::SweepOptions options;
  options.out_dir = out;
  bool armed = false;
  options.on_progress = [&](const bench::SweepProgress& progress) {
    if (armed || progress.current == nullptr) return;
    armed = true;
    fault::arm(site, nth == 0 ? std::numeric_limits<std::uint64_t>::max() : nth);
  };
  FaultRun run;
  run.outcome = bench::run_sweep(spec, options, Registry::global());
  run.events = fault::events(site);
  run.injected = fault::injected(site);
  fault::disarm();
  return run;
}

// Every file of the output directory parses, and holds the rows of the outcome.
void expect_valid_files(const fs::path& out, std::size_t rows) {
  std::ifstream json_in(out / bench::kJsonFile);
  const auto json = nlohmann::json::parse(json_in);
  EXPECT_EQ(json["rows"].size(), rows);
  std::vector<std::string> warnings;
  EXPECT_EQ(report::read_jsonl(out / bench::kRowsFile, &warnings).size(), rows);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(report::load_results(out / bench::kCsvFile).rows.size(), rows);
}

// The points n tried: the first events, then spread evenly up to the last; every one of them
// with ATTNSUITE_FAULT_EVERY=1 in the environment (minutes instead of seconds; the figures in
// docs/reliability.md).
std::vector<std::uint64_t> points(std::uint64_t total, int count) {
  if (const char* every = std::getenv("ATTNSUITE_FAULT_EVERY"); every != nullptr && std::string(every) == "1") {
    std::vector<std::uint64_t> all(total);
    std::iota(all.begin(), all.end(), std::uint64_t{1});
    return all;
  }
  std::set<std::uint64_t> n = {1, 2, 3, total};
  for (int i = 1; i < count; ++i) n.insert(1 + (total - 1) * static_cast<std::uint64_t>(i) / count);
  return {n.begin(), n.end()};
}

// Runs the clean sweep, then one sweep per failing point; returns the number of points.
int survive_faults(const bench::SweepSpec& spec, fault::Site site, DeviceType tracked, const std::string& name,
                   const std::function<void()>& check_device_baseline) {
  MemoryTracker& tracker = MemoryTracker::for_device(tracked);
  const std::size_t baseline = tracker.current();
  const fs::path clean_dir = fresh_dir(name + "_clean");
  const FaultRun clean = sweep_with_fault(spec, clean_dir, site, 0);
  fs::remove_all(clean_dir);
  for (const auto& row : clean.outcome.rows)
    EXPECT_EQ(row.status, bench::CaseStatus::Ok) << row.backend << ": " << row.reason;
  EXPECT_GT(clean.events, 10u) << "the sweep makes too few events to inject faults into";
  EXPECT_EQ(tracker.current(), baseline);
  int tried = 0;
  for (const std::uint64_t nth : points(clean.events, 12)) {
    SCOPED_TRACE("fault at event " + std::to_string(nth) + " of " + std::to_string(clean.events));
    const fs::path out = fresh_dir(name + "_" + std::to_string(nth));
    const FaultRun run = sweep_with_fault(spec, out, site, nth);
    EXPECT_EQ(run.injected, 1u);
    if (run.outcome.rows.size() != clean.outcome.rows.size()) {  // the sweep must go on to the end
      ADD_FAILURE() << run.outcome.rows.size() << " rows, a clean sweep has " << clean.outcome.rows.size();
      continue;
    }
    int failed = 0;
    for (std::size_t i = 0; i < run.outcome.rows.size(); ++i) {
      const auto& row = run.outcome.rows[i];
      EXPECT_EQ(row.case_key(), clean.outcome.rows[i].case_key());
      if (row.status == bench::CaseStatus::Failed) {
        ++failed;
        EXPECT_NE(row.reason.find("fault injected by ATTNSUITE_FAULT"), std::string::npos) << row.reason;
      } else {
        EXPECT_EQ(row.status, bench::CaseStatus::Ok) << row.reason;
      }
    }
    EXPECT_EQ(failed, 1);
    EXPECT_EQ(tracker.current(), baseline) << "tracked memory leaked";
    if (check_device_baseline) check_device_baseline();
    expect_valid_files(out, run.outcome.rows.size());
    fs::remove_all(out);
    ++tried;
  }
  std::printf(
      "[ faults   ] %d sweeps of %zu cases, each with event n of %llu failed (n = first ... last), all survived\n",
      tried, clean.outcome.rows.size(), static_cast<unsigned long long>(clean.events));
  return tried;
}

TEST(FaultInjection, SpecParsing) {
  fault::arm_from_spec("alloc:3");
  EXPECT_EQ(fault::fail_here(fault::Site::HostAlloc), 0u);
  EXPECT_EQ(fault::fail_here(fault::Site::HostAlloc), 0u);
  EXPECT_EQ(fault::fail_here(fault::Site::HostAlloc), 3u);
  EXPECT_EQ(fault::fail_here(fault::Site::HostAlloc), 0u);  // once
  EXPECT_EQ(fault::injected(fault::Site::HostAlloc), 1u);
  fault::arm_from_spec("cuda:2,alloc:1");
  EXPECT_EQ(fault::fail_here(fault::Site::HostAlloc), 1u);
  EXPECT_EQ(fault::fail_here(fault::Site::CudaCall), 0u);
  EXPECT_EQ(fault::fail_here(fault::Site::CudaCall), 2u);
  fault::disarm();
  for (const char* bad : {"alloc", "alloc:", "alloc:0", "alloc:-1", "alloc:1x", "disk:3", "alloc:1,alloc:2", ",",
                          "cuda:99999999999999999999"}) {
    try {
      fault::arm_from_spec(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Usage);
      EXPECT_NE(std::string(error.what()).find("alloc:N or cuda:N"), std::string::npos) << error.what();
    }
  }
  fault::disarm();
}

TEST(FaultInjection, HostBufferFailsCleanly) {
  MemoryTracker& tracker = MemoryTracker::for_device(DeviceType::Cpu);
  const std::size_t before = tracker.current();
  fault::arm(fault::Site::HostAlloc, 2);
  HostBuffer first(1024);
  try {
    HostBuffer second(4096);
    ADD_FAILURE() << "the second allocation did not fail";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::OutOfMemory);
    EXPECT_NE(std::string(error.what()).find("allocation #2"), std::string::npos) << error.what();
  }
  EXPECT_EQ(tracker.current(), before + 1024);
  fault::disarm();
}

TEST(FaultInjection, HostAllocationFailuresMidSweep) {
  const auto spec = fixed_spec({"cpu-vanilla", "cpu-flash"}, DType::F32, 32);
  const int tried = survive_faults(spec, fault::Site::HostAlloc, DeviceType::Cpu, "host", {});
  EXPECT_GE(tried, 10);
}

TEST(FaultInjection, CliReadsTheEnvironment) {
  const fs::path out = fresh_dir("cli");
  const std::string command =
      std::string("ATTNSUITE_FAULT=alloc:9 '") + ATTNSUITE_CLI_PATH +
      "' bench --backends cpu-vanilla,cpu-flash --dtype fp32 --batch 1 --seq 7,33 --heads 2 --head-dim 32 "
      "--min-reps 2 --max-reps 2 --warmup 1 --hot --quiet --out '" +
      out.string() + "' >/dev/null 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);  // a case failed; the sweep finished
  const auto rows = report::read_jsonl(out / bench::kRowsFile, nullptr);
  ASSERT_EQ(rows.size(), 4u);
  int failed = 0;
  for (const auto& row : rows) {
    if (row.status != bench::CaseStatus::Failed) continue;
    ++failed;
    EXPECT_NE(row.reason.find("ATTNSUITE_FAULT=alloc:9"), std::string::npos) << row.reason;
  }
  EXPECT_EQ(failed, 1);
  fs::remove_all(out);

  const std::string bad = std::string("ATTNSUITE_FAULT=alloc:zero '") + ATTNSUITE_CLI_PATH +
                          "' bench --backends cpu-flash --out '" + out.string() + "' >/dev/null 2>&1";
  const int bad_status = std::system(bad.c_str());
  ASSERT_TRUE(WIFEXITED(bad_status));
  EXPECT_EQ(WEXITSTATUS(bad_status), 2);
  EXPECT_FALSE(fs::exists(out));
}

#if ATTNSUITE_HAVE_CUDA
TEST(FaultInjection, CudaCallFailuresMidSweep) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<std::string> backends;
  for (const char* name : {"cuda-vanilla", "flash2"})
    if (Registry::global().contains(name)) backends.emplace_back(name);
  ASSERT_FALSE(backends.empty());
  const auto spec = fixed_spec(backends, DType::F16, 64);
  // Device memory the driver reports free, besides the tracker: cudaFree'd buffers return to
  // the driver at once. A margin for what the CUDA runtime itself may keep (module loads).
  std::size_t free_before = 0, total = 0;
  // A clean sweep first, so that lazily created handles (cuBLAS) exist before the baseline.
  {
    const fs::path warm = fresh_dir("cuda_warm");
    sweep_with_fault(spec, warm, fault::Site::CudaCall, 0);
    fs::remove_all(warm);
  }
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  auto device_baseline = [&] {
    std::size_t free_now = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_now, &total), cudaSuccess);
    EXPECT_GE(free_now + (std::size_t{4} << 20), free_before) << "device memory not back at its baseline";
  };
  const int tried = survive_faults(spec, fault::Site::CudaCall, DeviceType::Cuda, "cuda", device_baseline);
  EXPECT_GE(tried, 10);
}
#endif

}  // namespace
}  // namespace attnsuite
