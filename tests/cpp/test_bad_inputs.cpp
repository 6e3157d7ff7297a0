// The bad-input matrix of docs/reliability.md, one test per row (C++ side; the Python rows are
// issue 8's). Each bad input must give one clear line (the value and what is allowed) and the
// documented exit code or row status, and must never lose or overwrite results.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "bench/plan.hpp"
#include "bench/runner.hpp"
#include "cli_test_support.hpp"
#include "core/host_info.hpp"
#include "gpu_test_support.hpp"
#include "report/jsonl.hpp"
#include "report/sweep.hpp"

namespace fs = std::filesystem;

namespace attnsuite {
namespace {

using testing_support::CliResult;
using testing_support::count_lines;
using testing_support::run_cli;
using testing_support::scratch;
using testing_support::slurp;

AttentionProblem valid_problem() {
  AttentionProblem p;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.seq_q = 128;
  p.seq_kv = 128;
  p.head_dim = 64;
  return p;
}

// The Usage error message of validate(), or "" when it accepts the problem.
std::string validation_error(const AttentionProblem& p) {
  try {
    p.validate();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Usage);
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
    return error.what();
  }
  return "";
}

void expect_cli_usage_error(const std::vector<std::string>& args, const std::string& needle) {
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

// A tiny CPU sweep's flags, output into `out`; `changes` replace a flag's value or add a flag
// ({"--force", ""} adds a switch).
std::vector<std::string> tiny(const fs::path& out,
                              const std::vector<std::pair<std::string, std::string>>& changes = {}) {
  std::vector<std::pair<std::string, std::string>> flags = {
      {"--backends", "cpu-flash"}, {"--dtype", "fp32"}, {"--batch", "1"},       {"--seq", "16"}, {"--heads", "2"},
      {"--head-dim", "32"},        {"--min-reps", "2"}, {"--max-time-ms", "5"}, {"--hot", ""},   {"--quiet", ""},
      {"--out", out.string()}};
  for (const auto& change : changes) {
    auto it = std::find_if(flags.begin(), flags.end(), [&](const auto& flag) { return flag.first == change.first; });
    if (it != flags.end()) {
      it->second = change.second;
    } else {
      flags.push_back(change);
    }
  }
  std::vector<std::string> args = {"bench"};
  for (const auto& [flag, value] : flags) {
    args.push_back(flag);
    if (!value.empty()) args.push_back(value);
  }
  return args;
}

// ---------------------------------------------------------------------------------------------
// Sizes.

TEST(BadInputs, ZeroAndNegativeSizes) {
  int AttentionProblem::*fields[] = {&AttentionProblem::batch, &AttentionProblem::heads_q, &AttentionProblem::heads_kv,
                                     &AttentionProblem::seq_q, &AttentionProblem::seq_kv,  &AttentionProblem::head_dim};
  const char* names[] = {"batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"};
  for (int i = 0; i < 6; ++i) {
    for (int value : {0, -1, INT_MIN}) {
      AttentionProblem p = valid_problem();
      p.*fields[i] = value;
      const std::string error = validation_error(p);
      EXPECT_NE(error.find(std::string(names[i]) + " = " + std::to_string(value) +
                           " is not allowed: it must be between 1 and 1073741824"),
                std::string::npos)
          << error;
    }
  }
  AttentionProblem p = valid_problem();
  p.head_dim_v = -3;
  EXPECT_NE(validation_error(p).find("head_dim_v = -3"), std::string::npos);
  // Through the CLI: exit 2, one line, nothing written.
  const fs::path out = scratch("sizes");
  expect_cli_usage_error(tiny(out, {{"--batch", "0"}}), "'batch' = 0 is out of range: allowed 1..1073741824");
  expect_cli_usage_error(tiny(out, {{"--seq", "-5"}}), "'seq' = -5 is out of range");
  expect_cli_usage_error(tiny(out, {{"--heads", "0"}}), "'heads' = 0 is out of range");
  expect_cli_usage_error(tiny(out, {{"--head-dim", "-64"}}), "'head_dim' = -64 is out of range");
  expect_cli_usage_error(tiny(out, {{"--batch", "abc"}}), "--batch");
  EXPECT_FALSE(fs::exists(out));
}

TEST(BadInputs, HugeSizes) {
  for (int value : {(1 << 30) + 1, INT_MAX}) {
    AttentionProblem p = valid_problem();
    p.seq_kv = value;
    EXPECT_NE(validation_error(p).find("seq_kv = " + std::to_string(value) + " is not allowed"), std::string::npos);
  }
  // Each size allowed, the product not: Q would hold 2^60 elements.
  AttentionProblem p = valid_problem();
  p.batch = 1 << 20;
  p.seq_q = 1 << 20;
  p.heads_q = 1 << 10;
  p.heads_kv = 1 << 10;
  p.head_dim = 1 << 10;
  const std::string error = validation_error(p);
  EXPECT_NE(error.find("the problem is too large: Q would hold 1.15e+18 elements (batch × seq_q × heads_q × head_dim); "
                       "at most 2^53"),
            std::string::npos)
      << error;
  // Sizes beyond an int in a suite file or flag, and beyond 2^64.
  const fs::path out = scratch("huge");
  expect_cli_usage_error(tiny(out, {{"--seq", "2000000000"}}),
                         "'seq' = 2000000000 is out of range: allowed 1..1073741824");
  expect_cli_usage_error(tiny(out, {{"--seq", "99999999999999999999"}}), "--seq");
  // Within each limit, but too large together: recorded as a skipped case with the reason.
  const CliResult r =
      run_cli(tiny(out, {{"--batch", "1048576"}, {"--seq", "1048576"}, {"--heads", "1024"}, {"--head-dim", "1024"}}));
  EXPECT_EQ(r.code, 3) << r.err;  // nothing ran: the one case was skipped
  const auto rows = report::read_jsonl(out / bench::kRowsFile, nullptr);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, bench::CaseStatus::Skipped);
  EXPECT_NE(rows[0].reason.find("the problem is too large"), std::string::npos) << rows[0].reason;
  fs::remove_all(out);
}

TEST(BadInputs, HeadsNotDivisibleByKvHeads) {
  AttentionProblem p = valid_problem();
  p.heads_q = 6;
  p.heads_kv = 4;
  EXPECT_NE(validation_error(p).find("heads_q = 6 is not divisible by heads_kv = 4"), std::string::npos);
  for (const char* name : {"reference", "cpu-vanilla", "cpu-flash"}) {
    const Support support = Registry::global().find(name).supports(p);
    EXPECT_FALSE(support.ok);
    EXPECT_NE(support.reason.find("not divisible"), std::string::npos) << name;
  }
  // In a sweep: skipped with the reason, the other cases run (test_cli.cpp checks the CLI).
  bench::SweepSpec spec;
  spec.backends = {"cpu-flash"};
  spec.dtypes = {DType::F32};
  spec.seq_q = {16};
  spec.heads = {{6, 4, 32, ""}, {6, 3, 32, ""}};
  spec.timing.cold = false;
  spec.timing.measure.min_reps = spec.timing.measure.max_reps = 2;
  bench::Runner runner(spec, Registry::global());
  const auto cases = bench::expand(spec);
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(runner.run(cases[0])->status, bench::CaseStatus::Skipped);
  EXPECT_EQ(runner.run(cases[1])->status, bench::CaseStatus::Ok);
}

TEST(BadInputs, WindowAndScale) {
  AttentionProblem p = valid_problem();
  p.window_left = -2;
  EXPECT_NE(validation_error(p).find("window (-2, -1) is not allowed"), std::string::npos);
  for (float scale : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    p = valid_problem();
    p.scale = scale;
    EXPECT_NE(validation_error(p).find("a positive finite number"), std::string::npos) << scale;
  }
  const fs::path out = scratch("window");
  expect_cli_usage_error(tiny(out, {{"--window", "-5,0"}}), "'window' = -5 is out of range");
  expect_cli_usage_error(tiny(out, {{"--window", "3"}}), "--window");
  EXPECT_FALSE(fs::exists(out));
}

// Head dims outside what a backend supports: a skipped case naming what is allowed.
TEST(BadInputs, UnsupportedHeadDimsAreSkippedWithWhatIsAllowed) {
  bench::SweepSpec spec;
  spec.backends = {"reference", "cpu-vanilla", "cpu-flash"};
  spec.dtypes = {DType::F32};
  spec.seq_q = {16};
  spec.heads = {{2, 2, 16, ""}, {2, 2, 512, ""}};
  spec.timing.cold = false;
  bench::Runner runner(spec, Registry::global());
  for (const auto& c : bench::expand(spec)) {
    const auto row = runner.run(c);
    EXPECT_EQ(row->status, bench::CaseStatus::Skipped) << c.backend;
    EXPECT_EQ(row->reason, "head dim " + std::to_string(c.problem.head_dim) + " not supported; allowed: 32..256");
  }
  // A dtype a backend does not take: skipped the same way.
  AttentionProblem p = valid_problem();
  p.dtype = DType::BF16;
  EXPECT_NE(Registry::global().find("cpu-vanilla").supports(p).reason.find("allowed: fp32"), std::string::npos);
}

// The C++ API: views that disagree with the problem are refused, naming the view.
TEST(BadInputs, MismatchedViewsAreRefused) {
  AttentionProblem p = valid_problem();
  p.batch = 1;
  p.seq_q = p.seq_kv = 8;
  std::vector<float> q(1 * 8 * 8 * 64), k(1 * 8 * 2 * 64), v(k.size()), o(q.size()), half(q.size());
  auto view = [&](std::vector<float>& data, std::int64_t heads) {
    TensorView t;
    t.data = data.data();
    t.dtype = DType::F32;
    t.shape = {1, 8, heads, 64};
    t.strides = TensorView::dense_strides(t.shape, Layout::BSHD);
    return t;
  };
  for (const char* name : {"reference", "cpu-vanilla", "cpu-flash"}) {
    Backend& backend = Registry::global().find(name);
    AttentionArgs args{view(q, 8), view(k, 2), view(v, 2), view(o, 8), {}, nullptr};
    EXPECT_NO_THROW(backend.forward(p, args, nullptr)) << name;
    auto expect_refused = [&](AttentionArgs bad, const std::string& needle) {
      try {
        backend.forward(p, bad, nullptr);
        ADD_FAILURE() << name << " accepted " << needle;
      } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
      }
    };
    AttentionArgs wrong_dtype = args;
    wrong_dtype.k.dtype = DType::F16;
    expect_refused(wrong_dtype, "k is fp16, the problem is fp32");
    AttentionArgs wrong_shape = args;
    wrong_shape.v.shape[1] = 9;
    expect_refused(wrong_shape, "v has shape (1, 9, 2, 64)");
    AttentionArgs wrong_device = args;
    wrong_device.o.device = {DeviceType::Cuda, 0};
    expect_refused(wrong_device, "o is on the cuda");
    AttentionArgs missing = args;
    missing.q.data = nullptr;
    expect_refused(missing, "q is missing");
  }
  (void)half;
}

// ---------------------------------------------------------------------------------------------
// Memory.

// The peak resident memory of this process so far (VmHWM), in bytes.
std::size_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

TEST(BadInputs, CasesLargerThanHostMemoryAreRefusedBeforeAllocating) {
  // Q, K, V and O of 64 GiB each in fp32: more than any machine this runs on has free.
  bench::SweepSpec spec;
  spec.backends = {"cpu-flash", "cpu-vanilla"};
  spec.dtypes = {DType::F32};
  spec.batches = {64};
  spec.seq_q = {65536};
  spec.heads = {{32, 32, 128, ""}};
  const double free_gib = host_info().available_memory_bytes() / 1073741824.0;
  ASSERT_LT(free_gib, 64 * 4) << "this machine has the memory for the case";
  const std::size_t resident_before = peak_resident_bytes();
  bench::Runner runner(spec, Registry::global());
  for (const auto& c : bench::expand(spec)) {
    ASSERT_TRUE(c.invalid_reason.empty()) << c.invalid_reason;
    const auto row = runner.run(c);
    EXPECT_EQ(row->status, bench::CaseStatus::Failed);
    EXPECT_NE(row->reason.find("out of memory: the case needs "), std::string::npos) << row->reason;
    EXPECT_NE(row->reason.find(" GiB of host memory, "), std::string::npos) << row->reason;
    EXPECT_NE(row->reason.find(" GiB free"), std::string::npos) << row->reason;
  }
  // Nothing of the case's size was allocated (or touched) before the refusal.
  EXPECT_LT(peak_resident_bytes(), resident_before + (std::size_t{256} << 20));
  // A backend's own temporaries: cpu-vanilla's B·H·N² scores beyond the free memory are refused
  // by the tracked allocator with the numbers.
  try {
    HostBuffer scores(std::size_t{1} << 50);
    ADD_FAILURE() << "1 PiB allocated";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::OutOfMemory);
    EXPECT_NE(std::string(error.what()).find("out of host memory: needs 1048576.00 GiB, "), std::string::npos)
        << error.what();
  }
}

TEST(BadInputs, CliRecordsTheMemoryRefusalAndGoesOn) {
  const fs::path out = scratch("memory");
  // A tiny case, then one whose inputs alone are terabytes: the second is refused, the first ran.
  const CliResult r = run_cli(tiny(out, {{"--batch", "1,2000000"},
                                         {"--seq", "256"},
                                         {"--heads", "32"},
                                         {"--head-dim", "128"},
                                         {"--max-reps", "2"},
                                         {"--max-time-ms", "1"}}));
  EXPECT_EQ(r.code, 1) << r.err;  // a case failed
  const auto rows = report::read_jsonl(out / bench::kRowsFile, nullptr);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].status, bench::CaseStatus::Ok) << rows[0].reason;
  EXPECT_EQ(rows[1].status, bench::CaseStatus::Failed);
  EXPECT_NE(rows[1].reason.find("GiB free"), std::string::npos) << rows[1].reason;
  fs::remove_all(out);
}

#if ATTNSUITE_HAVE_CUDA
// The device-side check: with all but 1 GiB of the GPU taken, a case needing 2 GiB of device
// memory is refused before the runner allocates any of it.
TEST(BadInputs, CasesLargerThanDeviceMemoryAreRefusedBeforeAllocating) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  void* hog = nullptr;
  ASSERT_EQ(cudaMalloc(&hog, free_bytes - (std::size_t{1} << 30)), cudaSuccess);
  bench::SweepSpec spec;
  spec.backends = {"flash2"};
  spec.dtypes = {DType::F16};
  spec.batches = {8};
  spec.seq_q = {8192};
  spec.heads = {{128, 128, 64, ""}};  // Q, K, V and O of 1 GiB each
  const std::size_t tracked = MemoryTracker::for_device(DeviceType::Cuda).current();
  bench::Runner runner(spec, Registry::global());
  for (const auto& c : bench::expand(spec)) {
    const auto row = runner.run(c);
    EXPECT_EQ(row->status, bench::CaseStatus::Failed);
    EXPECT_NE(row->reason.find("out of memory: the case needs"), std::string::npos) << row->reason;
    EXPECT_NE(row->reason.find("GiB on cuda:0, "), std::string::npos) << row->reason;
  }
  EXPECT_EQ(MemoryTracker::for_device(DeviceType::Cuda).current(), tracked);
  cudaFree(hog);
}
#endif

// ---------------------------------------------------------------------------------------------
// Suite files.

fs::path write_suite(const std::string& name, const std::string& text) {
  const fs::path dir = scratch("suites");
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << text;
  return dir / name;
}

TEST(BadInputs, MalformedSuiteFiles) {
  const fs::path out = scratch("malformed");
  const std::pair<std::string, std::string> files[] = {
      {"truncated.json", R"({"backends": ["cpu-flash"], "batch": [1,)"},
      {"empty.json", ""},
      {"garbage.json", std::string("\x00\xff\xfe{\x01", 5)},
      {"bad_utf8.json", "{\"backends\": [\"cpu-\xff\"]}"},
      {"truncated.toml", "backends = [\"cpu-flash\"\nbatch = \n"},
      {"datetime.toml", "backends = \"cpu-flash\"\nwhen = 1979-05-27T07:32:00Z\n"},
  };
  for (const auto& [name, text] : files) {
    SCOPED_TRACE(name);
    const fs::path suite = write_suite(name, text);
    const std::string expected = name == "datetime.toml"   ? "dates and times are not allowed"
                                 : name.ends_with(".toml") ? "malformed TOML at line"
                                                           : "malformed JSON";
    expect_cli_usage_error({"bench", "--suite", suite.string(), "--out", out.string()}, expected);
  }
  // A directory where a file is expected, and a missing file.
  const fs::path dir_suite = scratch("suites") / "dir.json";
  fs::create_directories(dir_suite);
  expect_cli_usage_error({"bench", "--suite", dir_suite.string(), "--out", out.string()}, "Is a directory");
  expect_cli_usage_error({"bench", "--suite", (scratch("suites") / "none.json").string(), "--out", out.string()},
                         "No such file or directory");
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(scratch("suites"));
}

TEST(BadInputs, HostileSuiteFiles) {
  const fs::path out = scratch("hostile");
  struct Hostile {
    std::string name, text, expected;
  };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string many_seqs = "[";
  for (int i = 1; i <= 1000; ++i) many_seqs += std::to_string(i) + (i < 1000 ? "," : "]");
  const Hostile suites[] = {
      {"deep.json", R"({"backends": )" + deep + "}", "nested deeper than 32 levels"},
      {"deep_value.json", R"({"backends": "cpu-flash", "seq": )" + deep + "}", "nested deeper than 32 levels"},
      {"nested_list.json", R"({"backends": [["cpu-flash"]]})",
       "'backends' must be a string or a list of strings, got a list of 1 items"},
      {"deep.toml", "backends = " + std::string(1000, '[') + std::string(1000, ']') + "\n", "malformed TOML"},
      {"overflow.json", R"({"backends": "cpu-flash", "seq": 1e999})", "number overflow"},
      {"uint64.json", R"({"backends": "cpu-flash", "window": [18446744073709551615, 0]})",
       "'window' = 18446744073709551615 is out of range"},
      {"int64_min.json", R"({"backends": "cpu-flash", "batch": -9223372036854775808})",
       "'batch' = -9223372036854775808 is out of range"},
      {"float_size.json", R"({"backends": "cpu-flash", "batch": 2.5})", "'batch' must be an integer"},
      {"nan_noise.toml", "backends = \"cpu-flash\"\n[timing]\nnoise = nan\n", "'timing.noise' = nan is out of range"},
      {"string_size.json", R"({"backends": "cpu-flash", "batch": "four"})", "got \"four\""},
      {"bool_causal.json", R"({"backends": "cpu-flash", "causal": 1})", "'causal' must be true, false"},
      {"object_backends.json", R"({"backends": {"a": 1}})", "got an object with 1 keys"},
      {"timing_number.json", R"({"backends": "cpu-flash", "timing": 5})", "'timing' must be an object, got 5"},
      {"empty_list.json", R"({"backends": []})", "'backends' is an empty list"},
      {"unknown_key.json", "{\"backends\": \"cpu-flash\", \"bat\\nch\": 1}", "unknown key 'bat\\nch'"},
      {"control_name.json", R"({"backends": "cpu-fl\nash"})", "a name without control characters"},
      {"long_string.json", R"({"backends": ")" + std::string(100000, 'x') + R"("})", "unknown backend 'xxx"},
      {"path_name.json", R"({"name": "../../etc", "backends": "cpu-flash"})", "'name' = \"../../etc\" is not allowed"},
      {"cases.json", R"({"backends": "cpu-flash", "seq": )" + many_seqs + R"(, "batch": )" + many_seqs + "}",
       "the axes make 1000000 cases"},
      {"cases2.json",
       R"({"backends": ["cpu-flash", "reference"], "seq": )" + many_seqs + R"(, "batch": )" + many_seqs + "}",
       "the axes make 2000000 cases; a sweep may hold at most 1000000"},
      {"heads.json",
       R"({"backends": "cpu-flash", "heads": )" + many_seqs + R"(, "kv_heads": )" + many_seqs + R"(, "head_dim": )" +
           many_seqs + "}",
       "make 1000000000 head configurations"},
  };
  for (const auto& [name, text, expected] : suites) {
    SCOPED_TRACE(name);
    const fs::path suite = write_suite(name, text);
    if (name == "cases.json") {  // exactly at the limit: accepted (not run here)
      EXPECT_NO_THROW((void)bench::parse_suite(bench::load_suite_json(suite.string()), name));
      continue;
    }
    expect_cli_usage_error({"bench", "--suite", suite.string(), "--out", out.string()}, expected);
  }
  // A file larger than a suite may be.
  {
    const fs::path big = write_suite("big.json", "");
    std::ofstream(big) << R"({"backends": "cpu-flash", "description": ")" << std::string(17 << 20, 'x') << "\"}";
    expect_cli_usage_error({"bench", "--suite", big.string(), "--out", out.string()},
                           "a suite file may hold at most 16 MiB");
  }
  // Suite values that flags override: "timing" of the wrong type meets --min-reps.
  const fs::path timing = write_suite("timing.json", R"({"backends": "cpu-flash", "timing": [1]})");
  expect_cli_usage_error({"bench", "--suite", timing.string(), "--min-reps", "3", "--out", out.string()},
                         "'timing' must be an object, got a list of 1 items");
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(scratch("suites"));
}

// ---------------------------------------------------------------------------------------------
// Output directories.

TEST(BadInputs, ExistingResultsAreNeverOverwrittenWithoutForce) {
  for (const char* file : {bench::kRowsFile, bench::kJsonFile, bench::kCsvFile, bench::kMarkdownFile}) {
    SCOPED_TRACE(file);
    const fs::path out = scratch("existing");
    fs::create_directories(out);
    std::ofstream(out / file) << "someone's results\n";
    expect_cli_usage_error(tiny(out), "already holds results (" + std::string(file) + "); use --resume");
    EXPECT_EQ(slurp(out / file), "someone's results\n");
    EXPECT_FALSE(fs::exists(out / bench::kSuiteFile));  // nothing else written either
    const CliResult forced = run_cli(tiny(out, {{"--force", ""}}));
    EXPECT_EQ(forced.code, 0) << forced.err;
    EXPECT_NE(slurp(out / bench::kJsonFile).find("cpu-flash"), std::string::npos);
    fs::remove_all(out);
  }
  // A regular file where the directory should be.
  const fs::path file = scratch("file_out");
  std::ofstream(file) << "x";
  expect_cli_usage_error(tiny(file), "output directory: cannot");
  EXPECT_EQ(slurp(file), "x");
  fs::remove(file);
}

TEST(BadInputs, UnwritableOutputDirectories) {
  // Work as root too (CI runs as root, which ignores permission bits): /proc takes no new
  // directories, and nothing can be created under a regular file.
  expect_cli_usage_error(tiny("/proc/attnsuite-results"),
                         "output directory: cannot create directory '/proc/attnsuite-results'");
  const fs::path file = scratch("parent_file");
  std::ofstream(file) << "x";
  expect_cli_usage_error(tiny(file / "results"), "output directory: cannot create directory");
  fs::remove(file);
}

TEST(BadInputs, ReadOnlyOutputDirectory) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root writes into read-only directories; UnwritableOutputDirectories covers root";
  const fs::path out = scratch("readonly");
  fs::create_directories(out);
  ::chmod(out.c_str(), 0555);
  expect_cli_usage_error(tiny(out), "output directory: cannot write into directory");
  ::chmod(out.c_str(), 0755);
  EXPECT_TRUE(fs::is_empty(out));
  fs::remove_all(out);
}

// --resume of a directory whose JSONL was damaged in the middle (not a torn last line): an
// error naming the file and line, and nothing overwritten.
TEST(BadInputs, CorruptResultsOnResume) {
  const fs::path out = scratch("corrupt");
  ASSERT_EQ(run_cli(tiny(out, {{"--seq", "16,24"}})).code, 0);
  std::string rows = slurp(out / bench::kRowsFile);
  const std::size_t second_line = rows.find('\n') + 1;
  rows.insert(second_line, "{not json}\n");
  std::ofstream(out / bench::kRowsFile) << rows;
  const std::string json_before = slurp(out / bench::kJsonFile);
  const CliResult r = run_cli(tiny(out, {{"--seq", "16,24"}, {"--resume", ""}}));
  EXPECT_EQ(r.code, 2) << r.err;  // a bad input file, as for report
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("results.jsonl line 2"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(out / bench::kRowsFile), rows);
  EXPECT_EQ(slurp(out / bench::kJsonFile), json_before);
  fs::remove_all(out);
}

// Results files given to report, compare and --resume: hostile content is one error line.
TEST(BadInputs, HostileResultsFiles) {
  const fs::path dir = scratch("hostile_results");
  fs::create_directories(dir);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::ofstream(dir / "deep.json") << R"({"rows": )" << deep << "}";
  std::ofstream(dir / "overflow.json") << R"({"rows": [{"backend": "a", "status": "ok", "ms_median": 1e999}]})";
  std::ofstream(dir / "deep.jsonl") << deep << "\n{}\n";
  for (const auto& [file, needle] : {std::pair<std::string, std::string>{"deep.json", "nested deeper than 32 levels"},
                                     {"overflow.json", "not valid JSON"},
                                     {"deep.jsonl", "line 1: nested deeper than 32 levels"}}) {
    const CliResult r = run_cli({"report", (dir / file).string()});
    EXPECT_EQ(r.code, 2) << file << ": " << r.err;  // bad input, as a missing file is
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
  fs::remove_all(dir);
}

TEST(BadInputs, FullyMaskedRowsThroughTheHarness) {
  // causal with seq_q > seq_kv: the first rows see no key; every backend's case is ok and
  // matches the reference (zeros there).
  const fs::path out = scratch("masked");
  const CliResult r = run_cli(tiny(
      out,
      {{"--backends", "cpu-flash,cpu-vanilla,reference"}, {"--seq", "48"}, {"--seq-kv", "16"}, {"--causal", "true"}}));
  EXPECT_EQ(r.code, 0) << r.err;
  for (const auto& row : report::read_jsonl(out / bench::kRowsFile, nullptr)) {
    EXPECT_EQ(row.status, bench::CaseStatus::Ok) << row.backend << ": " << row.reason;
    EXPECT_LT(*row.max_abs_err, 1e-5) << row.backend;
  }
  fs::remove_all(out);
}

}  // namespace
}  // namespace attnsuite
