// `attnsuite export-onnx`: the exporter lives in the Python package (attnsuite.onnx, over the
// onnx package); this subcommand runs it with the Python this build was configured with and
// passes every argument through, so both spellings behave the same.
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "attnsuite/error.hpp"
#include "commands.hpp"

extern char** environ;

namespace attnsuite::cli {

namespace {

// Imports the package's exporter and runs it; a missing package is one clear line, exit 2.
constexpr const char* kBootstrap =
    "import sys\n"
    "try:\n"
    "    from attnsuite.onnx import main\n"
    "except ImportError as error:\n"
    "    hint = ('install the package: pip install . (or build it in-tree: ./scripts/setup.sh)' if error.name in "
    "('attnsuite', 'attnsuite._core') else 'install the exporter\\'s dependencies: pip install onnx onnxruntime')\n"
    "    sys.stderr.write(f'attnsuite: error: export-onnx runs in the attnsuite Python package and needs {error.name}; "
    "'\n"
    "                     f'{hint} (python: {sys.executable})\\n')\n"
    "    sys.exit(2)\n"
    "sys.exit(main(sys.argv[1:], prog='attnsuite export-onnx'))\n";

std::string python_executable() {
  if (const char* chosen = std::getenv("ATTNSUITE_PYTHON"); chosen != nullptr && *chosen != '\0') return chosen;
#ifdef ATTNSUITE_PYTHON_EXECUTABLE
  return ATTNSUITE_PYTHON_EXECUTABLE;
#else
  return "python3";
#endif
}

}  // namespace

Action add_export_onnx(CLI::App& app) {
  app.allow_extras();
  app.prefix_command();
  app.set_help_flag();  // --help goes to the exporter, which knows its options
  return [&app]() -> int {
    const std::string python = python_executable();
    std::vector<std::string> args{python, "-c", kBootstrap};
    for (const auto& arg : app.remaining()) args.push_back(arg);
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);

    // The package built in-tree (<build>/python) is found without installing it.
    std::vector<std::string> environment;
    for (char** entry = environ; *entry != nullptr; ++entry)
      if (std::strncmp(*entry, "PYTHONPATH=", 11) != 0) environment.emplace_back(*entry);
    std::string python_path;
#ifdef ATTNSUITE_BUILD_PYTHON_DIR
    if (std::filesystem::exists(ATTNSUITE_BUILD_PYTHON_DIR)) python_path = ATTNSUITE_BUILD_PYTHON_DIR;
#endif
    if (const char* existing = std::getenv("PYTHONPATH"); existing != nullptr && *existing != '\0')
      python_path += (python_path.empty() ? "" : ":") + std::string(existing);
    if (!python_path.empty()) environment.push_back("PYTHONPATH=" + python_path);
    std::vector<char*> envp;
    for (auto& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);

    pid_t child = 0;
    const int spawned = posix_spawnp(&child, python.c_str(), nullptr, nullptr, argv.data(), envp.data());
    if (spawned != 0)
      throw Error(ErrorKind::Usage,
                  fmt::format("export-onnx runs the Python package, but '{}' could not be started: {} "
                              "(set ATTNSUITE_PYTHON to a python3 that has attnsuite installed)",
                              python, std::strerror(spawned)));
    int status = 0;
    while (waitpid(child, &status, 0) < 0) {
      if (errno != EINTR) throw Error(ErrorKind::Internal, fmt::format("waitpid: {}", std::strerror(errno)));
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    // Stopped by a signal (Ctrl-C reaches the exporter too): 128 + the signal, as the shell says.
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : kExitFailed;
  };
}

}  // namespace attnsuite::cli
