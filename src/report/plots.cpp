#include "report/plots.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "attnsuite/error.hpp"
#include "bench/profile.hpp"
#include "core/atomic_file.hpp"

extern char** environ;

namespace attnsuite::report {

namespace fs = std::filesystem;

namespace {

// A private scratch directory, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / fmt::format("attnsuite-plots-{}-{}", ::getpid(), counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string tail_lines(const std::string& text, std::size_t lines) {
  std::size_t position = text.size();
  while (position > 0 && (text[position - 1] == '\n' || text[position - 1] == ' ')) --position;
  const std::size_t end = position;
  for (std::size_t seen = 0; position > 0; --position) {
    if (text[position - 1] == '\n' && ++seen == lines) break;
  }
  return text.substr(position, end - position);
}

}  // namespace

int run_process(const std::vector<std::string>& argv, const fs::path& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::optional<std::string> find_plot_python(std::string* why_not) {
  std::vector<std::string> candidates;
  if (const char* chosen = std::getenv("ATTNSUITE_PYTHON"); chosen != nullptr && *chosen != '\0') {
    candidates.push_back(chosen);
  } else {
    candidates = {"python3", "/usr/bin/python3"};
  }
  ScratchDir scratch;
  std::vector<std::string> tried;
  for (const std::string& python : candidates) {
    const fs::path log = scratch.path() / "probe.log";
    const int code = run_process({python, "-c", "import matplotlib, numpy"}, log);
    if (code == 0) return python;
    std::string problem = code < 0 ? "could not be run" : tail_lines(read_text_file(log), 1);
    tried.push_back(fmt::format("{}: {}", python, problem));
  }
  if (why_not != nullptr) {
    *why_not = "no Python 3 with matplotlib (";
    for (std::size_t i = 0; i < tried.size(); ++i) *why_not += (i ? "; " : "") + tried[i];
    *why_not += "); scripts/setup.sh installs python3-matplotlib, or set ATTNSUITE_PYTHON";
  }
  return std::nullopt;
}

nlohmann::json plot_data(const bench::RunHeader& header, const std::vector<bench::ResultRow>& rows,
                         const nlohmann::json& tuning) {
  nlohmann::json data;
  data["header"] = bench::to_json(header);
  data["rows"] = nlohmann::json::array();
  std::set<std::pair<std::string, std::string>> pairs;
  for (const bench::ResultRow& row : rows) {
    data["rows"].push_back(bench::to_json(row));
    if (row.status == bench::CaseStatus::Ok) pairs.emplace(row.device, row.dtype);
  }
  data["roofs"] = nlohmann::json::array();
  for (const auto& [device, dtype] : pairs) {
    const bench::Roof roof = bench::roof_for(header.ceilings, device, dtype);
    if (!roof.complete()) continue;
    data["roofs"].push_back({{"device", device},
                             {"dtype", dtype},
                             {"compute_tflops", roof.compute_flops_per_s * 1e-12},
                             {"memory_gbps", roof.memory_bytes_per_s * 1e-9},
                             {"compute_label", roof.compute_label},
                             {"memory_label", roof.memory_label}});
  }
  data["tuning"] = tuning.is_null() ? nlohmann::json::array() : tuning;
  return data;
}

std::vector<PlotFile> make_plots(const std::string& python, const nlohmann::json& data, const fs::path& out_dir) {
  ensure_writable_directory(out_dir);
  const fs::path out = fs::absolute(out_dir);
  ScratchDir scratch;
  const fs::path script = scratch.path() / "plots.py";
  const fs::path input = scratch.path() / "data.json";
  const fs::path log = scratch.path() / "plots.log";
  write_file_atomic(script, std::string(plots_script()));
  write_file_atomic(input, data.dump());
  const int code = run_process({python, script.string(), input.string(), "--out", out.string()}, log);
  if (code != 0) {
    throw Error(ErrorKind::Io, fmt::format("the plot script ({} src/report/plots.py) failed with exit code {}: {}",
                                           python, code, tail_lines(read_text_file(log), 3)));
  }
  const nlohmann::json manifest = nlohmann::json::parse(read_text_file(out / "plots.json"));
  std::vector<PlotFile> files;
  for (const auto& item : manifest) {
    PlotFile file;
    file.name = item.at("name").get<std::string>();
    file.title = item.at("title").get<std::string>();
    file.caption = item.at("caption").get<std::string>();
    file.png = out / item.at("png").get<std::string>();
    file.svg = out / item.at("svg").get<std::string>();
    files.push_back(std::move(file));
  }
  return files;
}

}  // namespace attnsuite::report
