// Plots through Python: the report hands its rows to src/report/plots.py (embedded in the
// binary), which draws them with matplotlib into PNG and SVG files.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/result.hpp"

namespace attnsuite::report {

// The text of src/report/plots.py.
std::string_view plots_script();

// A Python 3 that imports matplotlib: $ATTNSUITE_PYTHON when set (and only it), else the first
// of `python3` on the PATH and /usr/bin/python3 that does (a pyenv or venv python3 may lack the
// Debian python3-matplotlib that scripts/setup.sh installs). nullopt with *why_not when none.
std::optional<std::string> find_plot_python(std::string* why_not = nullptr);

struct PlotFile {
  std::string name, title, caption;
  std::filesystem::path png, svg;  // absolute
};

// What the plot script reads: header, rows, tuning, and the roofs (compute and memory ceiling
// per device and dtype among the ok rows; bench::roof_for), so the script applies no rule of
// its own.
nlohmann::json plot_data(const bench::RunHeader& header, const std::vector<bench::ResultRow>& rows,
                         const nlohmann::json& tuning);

// Runs the script on plot_data(...) with `python`, writing into out_dir (created). Returns the
// plots it made, in order. Throws Error(Io) with the script's last lines of output when it fails.
std::vector<PlotFile> make_plots(const std::string& python, const nlohmann::json& data,
                                 const std::filesystem::path& out_dir);

// Runs argv[0] (searched on the PATH) with the arguments; stdout and stderr go to log_path.
// Returns the exit status, or -1 when it could not be started or was killed by a signal.
int run_process(const std::vector<std::string>& argv, const std::filesystem::path& log_path);

}  // namespace attnsuite::report
