// `attnsuite report FILE` and `attnsuite compare A B`.
#include <fmt/format.h>

#include <filesystem>

#include "attnsuite/error.hpp"
#include "commands.hpp"
#include "report/atomic_file.hpp"
#include "report/compare.hpp"
#include "report/load.hpp"
#include "report/sinks.hpp"

namespace attnsuite::cli {

namespace {
report::LoadedResults load_existing(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw Error(ErrorKind::Usage, fmt::format("results file '{}' does not exist", path));
  return report::load_results(path);
}
}  // namespace

Action add_report(CLI::App& app) {
  struct Flags {
    std::string file, markdown, csv, json;
  };
  auto f = std::make_shared<Flags>();
  app.add_option("file", f->file, "Results file: results.json, results.jsonl or results.csv")->required();
  app.add_option("--markdown", f->markdown, "Also write the summary table as Markdown to this file");
  app.add_option("--csv", f->csv, "Also write the rows as CSV to this file");
  app.add_option("--json", f->json, "Also write the rows (and header) as JSON to this file");
  return [f] {
    report::LoadedResults loaded = load_existing(f->file);
    for (const auto& warning : loaded.warnings) fmt::print(stderr, "attnsuite: warning: {}\n", warning);
    report::fill_relative_to_vanilla(loaded.rows);
    const auto& h = loaded.header;
    if (!h.started_at.empty())
      fmt::print("{} — suite '{}', {} on {}{}, commit {}\n", f->file, h.suite, h.started_at, h.hostname,
                 h.gpu_name.empty() ? "" : " (" + h.gpu_name + ")", h.git_commit);
    fmt::print("{}", report::summary_terminal(loaded.rows));
    if (!f->markdown.empty()) report::write_file_atomic(f->markdown, report::summary_markdown(loaded.rows));
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
    fmt::print("A = {}\nB = {}\nflagged faster/slower beyond 2x the measured noise\n{}",
               f->a, f->b, comparison.terminal);
    if (!f->markdown.empty()) report::write_file_atomic(f->markdown, comparison.markdown);
    return kExitOk;
  };
}

}  // namespace attnsuite::cli
