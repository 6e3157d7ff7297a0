#include "report/shard.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <map>
#include <set>

#include "attnsuite/error.hpp"
#include "bench/runner.hpp"
#include "core/atomic_file.hpp"
#include "report/jsonl.hpp"
#include "report/sinks.hpp"
#include "report/sweep.hpp"

namespace attnsuite::bench {

namespace fs = std::filesystem;

namespace {

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

ShardInfo parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const auto rank = slash == std::string::npos ? std::nullopt : parse_int(std::string_view(text).substr(0, slash));
  const auto world = slash == std::string::npos ? std::nullopt : parse_int(std::string_view(text).substr(slash + 1));
  if (!rank || !world || *world < 1 || *rank < 0 || *rank >= *world)
    throw Error(ErrorKind::Usage,
                fmt::format("--shard {}: expected RANK/WORLD with 0 <= RANK < WORLD, e.g. 0/4", text));
  return ShardInfo{*rank, *world, -1, "--shard"};
}

std::optional<ShardInfo> shard_from_environment(const std::function<const char*(const char*)>& getenv_fn) {
  const auto get = [&](const char* name) -> const char* {
    const char* value = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return value != nullptr && *value != '\0' ? value : nullptr;
  };
  const auto number = [&](const char* name) -> int {
    const char* text = get(name);
    const auto value = text ? parse_int(text) : std::nullopt;
    if (!value)
      throw Error(ErrorKind::Usage, fmt::format("environment: {}='{}' is not an integer", name, text ? text : ""));
    return *value;
  };
  const auto local_rank = [&]() {
    for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
      if (get(name)) return number(name);
    return -1;
  };
  const auto checked = [&](ShardInfo info) {
    if (info.world < 1 || info.rank < 0 || info.rank >= info.world)
      throw Error(ErrorKind::Usage,
                  fmt::format("environment: {} gives rank {} of world size {}; need 0 <= rank < world", info.source,
                              info.rank, info.world));
    info.local_rank = local_rank();
    return info;
  };
  // Rank and size come in pairs; one without the other is a broken launch, not "not sharded".
  const std::pair<const char*, const char*> pairs[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"RANK", "WORLD_SIZE"},
  };
  const char* launchers[] = {"mpirun (Open MPI)", "PMI (MPICH, Intel MPI, srun)", "torchrun"};
  for (std::size_t i = 0; i < std::size(pairs); ++i) {
    const auto [rank, size] = pairs[i];
    if (!get(rank) && !get(size)) continue;
    if (!get(rank) || !get(size))
      throw Error(ErrorKind::Usage, fmt::format("environment: {} is set but {} is not", get(rank) ? rank : size,
                                                get(rank) ? size : rank));
    return checked({number(rank), number(size), -1, fmt::format("{}/{} ({})", rank, size, launchers[i])});
  }
  if (get("SLURM_ARRAY_TASK_ID")) {
    const int id = number("SLURM_ARRAY_TASK_ID");
    const int min = get("SLURM_ARRAY_TASK_MIN") ? number("SLURM_ARRAY_TASK_MIN") : 0;
    const int step = get("SLURM_ARRAY_TASK_STEP") ? number("SLURM_ARRAY_TASK_STEP") : 1;
    if (step < 1)
      throw Error(ErrorKind::Usage, fmt::format("environment: SLURM_ARRAY_TASK_STEP={} must be >= 1", step));
    int count = 0;
    if (get("SLURM_ARRAY_TASK_COUNT")) {
      count = number("SLURM_ARRAY_TASK_COUNT");
    } else if (get("SLURM_ARRAY_TASK_MAX")) {
      count = (number("SLURM_ARRAY_TASK_MAX") - min) / step + 1;
    } else {
      throw Error(
          ErrorKind::Usage,
          "environment: SLURM_ARRAY_TASK_ID is set but neither SLURM_ARRAY_TASK_COUNT nor SLURM_ARRAY_TASK_MAX");
    }
    if ((id - min) % step != 0)
      throw Error(ErrorKind::Usage, fmt::format("environment: SLURM_ARRAY_TASK_ID={} is not MIN={} plus a multiple of "
                                                "STEP={}",
                                                id, min, step));
    return checked({(id - min) / step, count, -1, "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT (Slurm job array)"});
  }
  if (get("SLURM_PROCID") || get("SLURM_NTASKS")) {
    if (!get("SLURM_PROCID") || !get("SLURM_NTASKS"))
      throw Error(ErrorKind::Usage, "environment: one of SLURM_PROCID and SLURM_NTASKS is set without the other");
    return checked({number("SLURM_PROCID"), number("SLURM_NTASKS"), -1, "SLURM_PROCID/SLURM_NTASKS (srun)"});
  }
  return std::nullopt;
}

std::string shard_dir_name(const ShardInfo& shard) { return fmt::format("shard-{}-of-{}", shard.rank, shard.world); }

std::string plan_fingerprint(const std::vector<Case>& cases) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a, 64 bits
  const auto mix = [&](std::string_view text) {
    for (const unsigned char c : text) {
      hash ^= c;
      hash *= 1099511628211ull;
    }
    hash ^= 0xff;  // a separator no key contains
    hash *= 1099511628211ull;
  };
  for (const Case& c : cases) mix(row_for_case(c, nullptr).case_key());
  return fmt::format("{:016x}-{}", hash, cases.size());
}

namespace {

struct Shard {
  fs::path dir;
  ShardInfo info;
  std::string plan;
  RunHeader header;
  std::vector<ResultRow> rows;
};

Shard read_shard(const fs::path& dir, std::vector<std::string>& warnings) {
  Shard shard;
  shard.dir = dir;
  const fs::path meta_path = dir / kShardFile;
  if (!fs::exists(meta_path))
    throw Error(ErrorKind::Usage, fmt::format("merge: '{}' is not a shard (no {}; shards are written by bench under "
                                              "mpirun/torchrun/Slurm or with --shard)",
                                              dir.string(), kShardFile));
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(report::read_text_file(meta_path));
    shard.info.rank = meta.at("rank").get<int>();
    shard.info.world = meta.at("world").get<int>();
    shard.plan = meta.at("plan").get<std::string>();
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorKind::Usage, fmt::format("merge: '{}' is malformed: {}", meta_path.string(), error.what()));
  }
  const fs::path rows_path = dir / kRowsFile;
  if (fs::exists(rows_path)) shard.rows = report::read_jsonl(rows_path, &warnings, &shard.header);
  return shard;
}

// The shard folders named on the command line; a folder that is not a shard itself but holds
// shard-*-of-* folders (the --out of the sharded runs) stands for all of them.
std::vector<fs::path> shard_dirs(const std::vector<fs::path>& given) {
  std::vector<fs::path> dirs;
  for (const fs::path& path : given) {
    if (!fs::is_directory(path))
      throw Error(ErrorKind::Usage, fmt::format("merge: '{}' is not a directory", path.string()));
    if (fs::exists(path / kShardFile)) {
      dirs.push_back(path);
      continue;
    }
    std::vector<fs::path> inside;
    for (const auto& entry : fs::directory_iterator(path))
      if (entry.is_directory() && entry.path().filename().string().rfind("shard-", 0) == 0 &&
          fs::exists(entry.path() / kShardFile))
        inside.push_back(entry.path());
    if (inside.empty())
      throw Error(ErrorKind::Usage, fmt::format("merge: '{}' holds no shard ({} or shard-*-of-*/{})", path.string(),
                                                kShardFile, kShardFile));
    std::sort(inside.begin(), inside.end());
    dirs.insert(dirs.end(), inside.begin(), inside.end());
  }
  return dirs;
}

}  // namespace

MergeOutcome merge_shards(const MergeOptions& options) {
  MergeOutcome outcome;
  if (options.shards.empty()) throw Error(ErrorKind::Usage, "merge: no shard given");
  std::vector<Shard> shards;
  for (const fs::path& dir : shard_dirs(options.shards)) shards.push_back(read_shard(dir, outcome.warnings));
  outcome.shards = shards.size();

  // One plan, one world size, each rank once.
  const Shard& first = shards.front();
  std::map<int, const Shard*> by_rank;
  for (const Shard& shard : shards) {
    if (shard.plan != first.plan || shard.info.world != first.info.world)
      throw Error(ErrorKind::Usage,
                  fmt::format("merge: '{}' and '{}' come from different plans (plan {} of {} shards vs plan {} of {} "
                              "shards): merge shards of one sweep only",
                              first.dir.string(), shard.dir.string(), first.plan, first.info.world, shard.plan,
                              shard.info.world));
    const auto [it, inserted] = by_rank.emplace(shard.info.rank, &shard);
    if (!inserted)
      throw Error(ErrorKind::Usage,
                  fmt::format("merge: '{}' and '{}' are both shard {} of {}", it->second->dir.string(),
                              shard.dir.string(), shard.info.rank, shard.info.world));
  }
  const int world = first.info.world;
  for (int rank = 0; rank < world; ++rank)
    if (!by_rank.contains(rank))
      throw Error(ErrorKind::Usage, fmt::format("merge: shard {} of {} is missing (its folder is {}); give every shard",
                                                rank, world, shard_dir_name({rank, world, -1, {}})));

  // The plan itself, from the suite the shards saved, so the merged rows keep its order.
  const fs::path suite_path = first.dir / kSuiteFile;
  if (!fs::exists(suite_path))
    throw Error(ErrorKind::Usage,
                fmt::format("merge: '{}' is missing: the shard's plan is unknown", suite_path.string()));
  const nlohmann::json suite_json = load_suite_json(suite_path.string());
  const std::vector<Case> cases = expand(parse_suite(suite_json, suite_path.string()));
  if (plan_fingerprint(cases) != first.plan)
    throw Error(
        ErrorKind::Usage,
        fmt::format("merge: the plan of '{}' ({}) is not the one the shards ran ({}); was it edited, or were the "
                    "shards made by another attnsuite version?",
                    suite_path.string(), plan_fingerprint(cases), first.plan));
  std::map<std::string, std::vector<std::size_t>> index_of;
  for (std::size_t i = 0; i < cases.size(); ++i) index_of[row_for_case(cases[i], nullptr).case_key()].push_back(i);

  std::vector<std::optional<ResultRow>> placed(cases.size());
  std::vector<const Shard*> placed_from(cases.size(), nullptr);
  for (const Shard& shard : shards) {
    for (const ResultRow& row : shard.rows) {
      const std::string key = row.case_key();
      const auto found = index_of.find(key);
      if (found == index_of.end())
        throw Error(ErrorKind::Usage,
                    fmt::format("merge: '{}' holds a case that is not in the plan: {}", shard.dir.string(), key));
      // A plan may list one case twice (repeated axis values): fill its slots in order.
      std::optional<std::size_t> slot;
      for (const std::size_t index : found->second)
        if (!placed[index]) {
          slot = index;
          break;
        }
      if (!slot)
        throw Error(ErrorKind::Usage,
                    fmt::format("merge: case '{}' appears more than once (in '{}' and '{}')", key,
                                placed_from[found->second.front()]->dir.string(), shard.dir.string()));
      placed[*slot] = row;
      placed_from[*slot] = &shard;
    }
  }
  std::size_t missing = 0;
  std::optional<std::size_t> first_missing;
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (!placed[i]) {
      ++missing;
      if (!first_missing) first_missing = i;
    }
  if (missing > 0) {
    const int owner = static_cast<int>(*first_missing % static_cast<std::size_t>(world));
    throw Error(ErrorKind::Usage,
                fmt::format("merge: {} of {} cases are missing, the first '{}' of shard {} ('{}'); finish that shard "
                            "with `attnsuite bench --resume --out DIR` under the same rank",
                            missing, cases.size(), row_for_case(cases[*first_missing], nullptr).case_key(), owner,
                            by_rank.at(owner)->dir.string()));
  }

  // The header of shard 0, spanning all shards' times and hosts.
  outcome.header = by_rank.at(0)->header;
  std::set<std::string> hosts;
  std::vector<std::string> host_order;
  for (const auto& [rank, shard] : by_rank) {
    const RunHeader& h = shard->header;
    if (!h.started_at.empty() && (outcome.header.started_at.empty() || h.started_at < outcome.header.started_at))
      outcome.header.started_at = h.started_at;
    if (h.finished_at > outcome.header.finished_at) outcome.header.finished_at = h.finished_at;
    outcome.header.interrupted = outcome.header.interrupted || h.interrupted;
    if (!h.hostname.empty() && hosts.insert(h.hostname).second) host_order.push_back(h.hostname);
  }
  outcome.header.hostname = fmt::format("{}", fmt::join(host_order, ","));
  outcome.header.settings["shards"] = world;

  outcome.rows.reserve(cases.size());
  for (auto& row : placed) outcome.rows.push_back(std::move(*row));
  report::fill_relative_to_vanilla(outcome.rows);

  try {
    report::ensure_writable_directory(options.out_dir);
  } catch (const Error& error) {
    throw Error(ErrorKind::Usage, fmt::format("output directory: {}", error.what()));
  }
  std::vector<std::string> existing;
  for (const char* name : {kRowsFile, kCsvFile, kJsonFile, kMarkdownFile})
    if (fs::exists(options.out_dir / name)) existing.emplace_back(name);
  if (!existing.empty() && !options.force)
    throw Error(ErrorKind::Usage, fmt::format("output directory '{}' already holds results ({}); use --force to "
                                              "overwrite them",
                                              options.out_dir.string(), fmt::join(existing, ", ")));
  std::string jsonl = nlohmann::json{{"header", to_json(outcome.header)}}.dump() + "\n";
  for (const ResultRow& row : outcome.rows) jsonl += to_ordered_json(row).dump() + "\n";
  report::write_file_atomic(options.out_dir / kRowsFile, jsonl);
  report::write_file_atomic(options.out_dir / kCsvFile, report::to_csv(outcome.rows));
  report::write_file_atomic(options.out_dir / kJsonFile,
                            report::to_results_json(outcome.header, outcome.rows).dump(2) + "\n");
  report::write_file_atomic(options.out_dir / kMarkdownFile, report::summary_markdown(outcome.rows));
  report::write_file_atomic(options.out_dir / kSuiteFile,
                            suite_json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return outcome;
}

}  // namespace attnsuite::bench
