// `attnsuite report FILE` and `attnsuite compare A B`.
#include <fmt/format.h>

#include <filesystem>

#include "attnsuite/error.hpp"
#include "attnsuite/registry.hpp"
#include "bench/profile.hpp"
#include "commands.hpp"
#include "core/atomic_file.hpp"
#include "report/compare.hpp"
#include "report/html_report.hpp"
#include "report/load.hpp"
#include "report/plots.hpp"
#include "report/sinks.hpp"
#include "report/tuning_table.hpp"

namespace attnsuite::cli {

namespace {
// A results file named on the command line that is missing, unreadable or not a results file
// is bad input, as a bad suite file is: exit code 2, whatever the loader's error kind.
report::LoadedResults load_existing(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw Error(ErrorKind::Usage, fmt::format("results file '{}' does not exist", path));
  try {
    return report::load_results(path);
  } catch (const Error& error) {
    if (error.kind() != ErrorKind::Io) throw;
    throw Error(ErrorKind::Usage, error.what());
  }
}

// A scratch directory for plots that only the HTML page needs; removed afterwards.
struct TemporaryPlots {
  std::filesystem::path dir;
  ~TemporaryPlots() {
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }
};
}  // namespace

Action add_report(CLI::App& app) {
  struct Flags {
    std::string file, markdown, csv, json, html, plots, compare;
  };
  auto f = std::make_shared<Flags>();
  app.add_option("file", f->file, "Results file: results.json, results.jsonl, results.csv or tune.json")->required();
  app.add_option("--html", f->html,
                 "Write one self-contained HTML page (tables, plots, machine, backends) to this file");
  app.add_option("--markdown", f->markdown, "Write the report as Markdown to this file (plots linked from --plots)");
  app.add_option("--plots", f->plots, "Write the plots (PNG and SVG, matplotlib) into this directory");
  app.add_option("--compare", f->compare, "Another results file (the baseline A) to compare this one (B) against");
  app.add_option("--csv", f->csv, "Also write the rows as CSV to this file");
  app.add_option("--json", f->json, "Also write the rows (and header) as JSON to this file");
  return [f] {
    report::LoadedResults loaded = load_existing(f->file);
    for (const auto& warning : loaded.warnings) fmt::print(stderr, "attnsuite: warning: {}\n", warning);
    report::fill_relative_to_vanilla(loaded.rows);
    bench::apply_profile(loaded.rows, loaded.header.ceilings);
    const auto& h = loaded.header;
    if (!h.started_at.empty())
      fmt::print("{} — suite '{}', {} on {}{}, commit {}\n", f->file, h.suite, h.started_at, h.hostname,
                 h.gpu_name.empty() ? "" : " (" + h.gpu_name + ")", h.git_commit);
    fmt::print("{}", report::summary_terminal(loaded.rows));
    if (report::has_profile(loaded.rows)) fmt::print("Profile\n{}", report::profile_table(loaded.rows).terminal());
    if (loaded.tuning.is_array() && !loaded.tuning.empty())
      fmt::print("Batch tuning\n{}", report::tuning_table(loaded.tuning).terminal());

    report::ReportDocument document;
    document.source = f->file;
    document.header = loaded.header;
    document.rows = loaded.rows;
    document.tuning = loaded.tuning;
    document.backends = report::backend_notes(loaded.rows, &Registry::global());
    if (!f->compare.empty()) {
      const auto baseline = load_existing(f->compare);
      document.comparison = report::compare_runs(baseline.rows, loaded.rows);
      document.compare_a = f->compare;
      document.compare_b = f->file;
      fmt::print("Compared with A = {} (B = this file)\n{}", f->compare, document.comparison->terminal);
    }

    // Plots: into --plots, or for the HTML page alone into a scratch directory.
    TemporaryPlots scratch;
    if (!f->plots.empty() || !f->html.empty()) {
      std::string why_not;
      const std::optional<std::string> python = report::find_plot_python(&why_not);
      if (!python && !f->plots.empty())
        throw Error(ErrorKind::Usage,
                    "--plots: " + why_not);  // a flag this machine cannot serve, as --gpus without a GPU
      if (python) {
        std::filesystem::path dir = f->plots;
        if (dir.empty()) {
          scratch.dir = std::filesystem::temp_directory_path() / fmt::format("attnsuite-report-{}", ::getpid());
          dir = scratch.dir;
        }
        document.plots = report::make_plots(*python, report::plot_data(loaded.header, loaded.rows, loaded.tuning), dir);
        if (!f->plots.empty()) fmt::print("{} plots (PNG and SVG) in {}/\n", document.plots.size(), f->plots);
      } else {
        document.plots_note = "Plots unavailable: " + why_not + ".";
        fmt::print(stderr, "attnsuite: warning: the HTML page has no plots: {}\n", why_not);
      }
    }
    if (!f->html.empty()) {
      report::write_file_atomic(f->html, report::render_html(document));
      fmt::print("HTML report in {}\n", f->html);
    }
    if (!f->markdown.empty()) report::write_file_atomic(f->markdown, report::render_markdown(document, f->markdown));
    if (!f->csv.empty()) report::write_file_atomic(f->csv, report::to_csv(loaded.rows));
    if (!f->json.empty()) report::write_file_atomic(f->json, report::results_json_text(loaded.header, loaded.rows));
    return kExitOk;
  };
}

Action add_compare(CLI::App& app) {
  struct Flags {
    std::string a, b, markdown;
  };
  auto f = std::make_shared<Flags>();
  app.add_option("baseline", f->a, "Results file A (the baseline)")->required();
  app.add_option("new", f->b, "Results file B (compared against A)")->required();
  app.add_option("--markdown", f->markdown, "Also write the comparison as Markdown to this file");
  return [f] {
    const auto a = load_existing(f->a);
    const auto b = load_existing(f->b);
    const report::Comparison comparison = report::compare_runs(a.rows, b.rows);
    fmt::print("A = {}\nB = {}\nflagged faster/slower beyond 2x the measured noise\n{}", f->a, f->b,
               comparison.terminal);
    if (!f->markdown.empty()) report::write_file_atomic(f->markdown, comparison.markdown);
    if (comparison.faster + comparison.slower + comparison.same == 0) {
      fmt::print(stderr, "attnsuite: nothing compared: no case has a median in both files\n");
      return kExitNothingRan;
    }
    return kExitOk;
  };
}

}  // namespace attnsuite::cli
