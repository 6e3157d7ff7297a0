// Running the attnsuite CLI from tests: captured output and exit codes, a spawned process to
// signal, scratch directories. Shared by test_cli.cpp and test_bad_inputs.cpp.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace attnsuite::testing_support {

namespace fs = std::filesystem;

struct CliResult {
  int code = -1;  // exit code; -1 when the process did not exit normally
  std::string out, err;
};

// A fresh, empty path under the temp directory, unique to this process.
inline fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attnsuite_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

inline std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline int count_lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

// Runs the CLI with arguments (and optional environment assignments, "NAME=value");
// stdout/stderr captured through files.
inline CliResult run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  const fs::path dir = scratch("io");
  fs::create_directories(dir);
  std::string command;
  for (const auto& assignment : env) command += "'" + assignment + "' ";
  if (!env.empty()) command = "env " + command;
  command += std::string("'") + ATTNSUITE_CLI_PATH + "'";
  for (const auto& a : args) command += " '" + a + "'";
  command += " >'" + (dir / "out").string() + "' 2>'" + (dir / "err").string() + "'";
  const int status = std::system(command.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  fs::remove_all(dir);
  return r;
}

// Starts the CLI with arguments, output to /dev/null; returns its pid (0 on failure).
inline pid_t spawn_cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv_strings = {ATTNSUITE_CLI_PATH};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return error == 0 ? pid : 0;
}

}  // namespace attnsuite::testing_support
