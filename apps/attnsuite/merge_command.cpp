// `attnsuite merge SHARD... --out DIR`: joins the shards of a sweep run over several processes
// (mpirun, torchrun, a Slurm array; issue 10, docs/multi-gpu.md) into the normal result files.
#include <fmt/format.h>

#include "commands.hpp"
#include "report/shard.hpp"
#include "report/sinks.hpp"
#include "report/sweep.hpp"

namespace attnsuite::cli {

Action add_merge(CLI::App& app) {
  struct Flags {
    std::vector<std::string> shards;
    std::string out;
    bool force = false, quiet = false;
  };
  auto f = std::make_shared<Flags>();
  app.add_option("shards", f->shards,
                 "Shard folders (OUT/shard-R-of-W), or the --out folder of the sharded runs, which holds them")
      ->required();
  app.add_option("-o,--out", f->out, "Output directory for the merged results")->required();
  app.add_flag("--force", f->force, "Overwrite results already in --out");
  app.add_flag("-q,--quiet", f->quiet, "No table");
  return [f]() -> int {
    bench::MergeOptions options;
    for (const auto& shard : f->shards) options.shards.emplace_back(shard);
    options.out_dir = f->out;
    options.force = f->force;
    const bench::MergeOutcome outcome = bench::merge_shards(options);
    for (const auto& warning : outcome.warnings) fmt::print(stderr, "attnsuite: warning: {}\n", warning);
    std::size_t failed = 0, skipped = 0;
    for (const auto& row : outcome.rows) {
      failed += row.status == bench::CaseStatus::Failed;
      skipped += row.status == bench::CaseStatus::Skipped;
    }
    if (!f->quiet) fmt::print("{}", report::summary_terminal(outcome.rows));
    fmt::print("merged {} shards: {} cases ({} failed). Results in {}/ ({}, {}, {}, {})\n", outcome.shards,
               outcome.rows.size(), failed, f->out, bench::kCsvFile, bench::kJsonFile, bench::kMarkdownFile,
               bench::kRowsFile);
    return run_exit_code(false, failed > 0, !outcome.rows.empty() && skipped == outcome.rows.size());
  };
}

}  // namespace attnsuite::cli
