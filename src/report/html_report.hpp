// `attnsuite report FILE --html OUT.html` / `--markdown OUT.md`: one page with the run's machine
// and ceilings, the summary and profile tables, the batch tuning, a comparison with another run,
// the plots and what each backend is. The HTML is self-contained: inline CSS, plots as inline
// SVG, no script, nothing fetched.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/registry.hpp"
#include "bench/result.hpp"
#include "report/compare.hpp"
#include "report/plots.hpp"

namespace attnsuite::report {

// What a backend of the rows is: its names, and its capabilities where this build has it.
struct BackendNote {
  std::string name, display_name, peer_of, device, what;
};

// One note per backend of the rows, in order of first appearance. `registry` (optional) gives
// the capabilities line of the backends this build has.
std::vector<BackendNote> backend_notes(const std::vector<bench::ResultRow>& rows, Registry* registry);

struct ReportDocument {
  std::string source;  // the results file, as given
  bench::RunHeader header;
  std::vector<bench::ResultRow> rows;
  nlohmann::json tuning;  // a tune file's "tuning", or null
  std::optional<Comparison> comparison;
  std::string compare_a, compare_b;  // the two files compared
  std::vector<PlotFile> plots;
  std::string plots_note;  // why there are no plots, when there are none
  std::vector<BackendNote> backends;
};

std::string render_html(const ReportDocument& document);
// Plots appear as PNG links relative to the Markdown file's directory.
std::string render_markdown(const ReportDocument& document, const std::filesystem::path& markdown_path);

// SVG text for inlining into an HTML page: the XML prolog and doctype removed, and every id
// (and the references to it: url(#id), href="#id") prefixed, so that several SVGs on one
// page cannot take each other's clip paths or markers.
std::string inline_svg(std::string_view svg, std::string_view prefix);

}  // namespace attnsuite::report
