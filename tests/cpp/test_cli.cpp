// The CLI as a user meets it: exit codes, one-line errors, files, and a real interrupted sweep.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "report/jsonl.hpp"

namespace fs = std::filesystem;
extern char** environ;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attnsuite_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the CLI with arguments; stdout/stderr captured through files.
Result run_cli(const std::vector<std::string>& args) {
  const fs::path dir = scratch("io");
  fs::create_directories(dir);
  std::string command = std::string("'") + ATTNSUITE_CLI_PATH + "'";
  for (const auto& a : args) command += " '" + a + "'";
  command += " >'" + (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
  const int status = std::system(command.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  fs::remove_all(dir);
  return r;
}

// A tiny, fast sweep on the CPU backends.
std::vector<std::string> tiny(const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"bench", "--backends", "cpu-vanilla,cpu-flash", "--dtype", "fp32", "--batch", "1",
                                   "--seq", "7,33", "--heads", "2", "--head-dim", "32", "--min-reps", "2",
                                   "--max-time-ms", "5", "--hot", "--quiet", "--out", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

int count_lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

void expect_usage_error(const std::vector<std::string>& args, const std::string& needle) {
  const Result r = run_cli(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;  // one clear line
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

}  // namespace

TEST(Cli, BenchWritesEveryFileAndTheTable) {
  const fs::path out = scratch("bench");
  const Result r = run_cli(tiny(out));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu-flash"), std::string::npos);
  EXPECT_NE(r.out.find("vs vanilla"), std::string::npos);
  for (const char* file : {"results.csv", "results.json", "summary.md", "results.jsonl", "suite.json"})
    EXPECT_TRUE(fs::exists(out / file)) << file;
  const auto json = nlohmann::json::parse(slurp(out / "results.json"));
  EXPECT_EQ(json["rows"].size(), 4u);
  EXPECT_FALSE(json["header"]["cpu_model"].get<std::string>().empty());
  EXPECT_EQ(count_lines(slurp(out / "results.csv")), 5);
  // The same directory again is refused (never overwritten without --force) ...
  expect_usage_error(tiny(out), "--resume");
  // ... and accepted with --force.
  EXPECT_EQ(run_cli(tiny(out, {"--force"})).code, 0);
  // report and compare read what bench wrote.
  const Result report = run_cli({"report", (out / "results.json").string()});
  EXPECT_EQ(report.code, 0) << report.err;
  EXPECT_NE(report.out.find("cpu-vanilla"), std::string::npos);
  const Result compare = run_cli({"compare", (out / "results.json").string(), (out / "results.csv").string()});
  EXPECT_EQ(compare.code, 0) << compare.err;
  EXPECT_NE(compare.out.find("0 faster, 0 slower, 4 same"), std::string::npos) << compare.out;
  fs::remove_all(out);
}

TEST(Cli, BadInputGivesOneLineAndExitCode2) {
  const fs::path out = scratch("bad");
  expect_usage_error({"bench", "--backends", "nope", "--out", out.string()}, "unknown backend 'nope'; available:");
  expect_usage_error({"bench", "--backends", "cpu-flash", "--batch", "0", "--out", out.string()}, "'batch' = 0");
  expect_usage_error({"bench", "--backends", "cpu-flash", "--seq", "-5", "--out", out.string()}, "");
  expect_usage_error({"bench", "--backends", "cpu-flash", "--model", "gpt-9", "--out", out.string()}, "unknown model 'gpt-9'");
  expect_usage_error({"bench", "--backends", "cpu-flash", "--dtype", "fp8", "--out", out.string()}, "fp8");
  expect_usage_error({"bench", "--suite", "no-such-suite", "--out", out.string()}, "unknown suite");
  expect_usage_error({"bench", "--backends", "cpu-flash", "--causal", "maybe", "--out", out.string()}, "--causal maybe");
  expect_usage_error({"bench", "--bogus-flag"}, "bogus");
  expect_usage_error({"report", "/no/such/results.json"}, "/no/such/results.json");
  const fs::path suite = fs::temp_directory_path() / ("attnsuite_cli_suite_" + std::to_string(::getpid()) + ".json");
  std::ofstream(suite) << "{\"backends\": [\"cpu-flash\"], \"batch\": [1,";
  expect_usage_error({"bench", "--suite", suite.string(), "--out", out.string()}, "malformed JSON");
  fs::remove(suite);
  EXPECT_FALSE(fs::exists(out / "results.json"));  // nothing written for refused runs
  fs::remove_all(out);
}

TEST(Cli, HeadsNotDivisibleIsSkippedWithTheReason) {
  const fs::path out = scratch("skip");
  const Result r = run_cli(tiny(out, {"--heads", "6", "--kv-heads", "4"}));
  EXPECT_EQ(r.code, 0) << r.err;
  const auto rows = attnsuite::report::read_jsonl(out / "results.jsonl", nullptr);
  ASSERT_FALSE(rows.empty());
  for (const auto& row : rows) {
    EXPECT_EQ(row.status, attnsuite::bench::CaseStatus::Skipped);
    EXPECT_NE(row.reason.find("not divisible"), std::string::npos);
  }
  fs::remove_all(out);
}

// A real process interrupted at a random point, then resumed: every finished case is on disk,
// files are valid, the exit code says interrupted, and --resume finishes without redoing cases.
TEST(Cli, SigintMidSweepThenResume) {
  const fs::path out = scratch("sigint");
  std::vector<std::string> args = {ATTNSUITE_CLI_PATH, "bench", "--backends", "cpu-flash,cpu-vanilla", "--dtype", "fp32",
                                   "--batch", "1,2,3", "--seq", "64,128,256", "--heads", "2", "--head-dim", "32",
                                   "--min-reps", "3", "--max-time-ms", "40", "--noise", "0.000001", "--quiet",
                                   "--out", out.string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  // Wait for at least one finished case, then a random extra delay.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    // The header line, then at least one finished case.
    if (fs::exists(out / "results.jsonl") && count_lines(slurp(out / "results.jsonl")) >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::mt19937 rng(std::random_device{}());
  std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 60)(rng)));
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  const int code = WEXITSTATUS(status);
  const auto rows_before = attnsuite::report::read_jsonl(out / "results.jsonl", nullptr);
  if (code == 0) {
    EXPECT_EQ(rows_before.size(), 18u);  // it finished before the signal landed
  } else {
    EXPECT_EQ(code, 130);
    EXPECT_LT(rows_before.size(), 18u);
  }
  EXPECT_GE(rows_before.size(), 1u);
  const auto partial = nlohmann::json::parse(slurp(out / "results.json"));  // valid JSON
  EXPECT_EQ(partial["rows"].size(), rows_before.size());

  const Result resumed = run_cli({"bench", "--resume", "--out", out.string(), "--quiet"});
  EXPECT_EQ(resumed.code, 0) << resumed.err;
  const auto rows = attnsuite::report::read_jsonl(out / "results.jsonl", nullptr);
  ASSERT_EQ(rows.size(), 18u);
  std::set<std::string> keys;
  for (const auto& row : rows) keys.insert(row.case_key());
  EXPECT_EQ(keys.size(), 18u);  // no case twice
  for (std::size_t i = 0; i < rows_before.size(); ++i)  // finished cases kept as they were
    EXPECT_EQ(rows[i].ms_median, rows_before[i].ms_median);
  fs::remove_all(out);
}
