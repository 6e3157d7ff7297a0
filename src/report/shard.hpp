// Sharded sweeps (issue 10): one sweep's cases split over processes (mpirun, torchrun, a Slurm
// job array) by case index, each process writing a shard; `attnsuite merge` joins the shards into
// the normal result files. docs/multi-gpu.md describes the environment variables and file names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/plan.hpp"
#include "bench/result.hpp"

namespace attnsuite::bench {

// This process's place among the processes of one sweep: it runs the cases i of the plan with
// i % world == rank.
struct ShardInfo {
  int rank = 0;
  int world = 1;
  // The launcher's local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID)
  // when it gave one: the GPU this process should use among the visible ones. -1 when unknown.
  int local_rank = -1;
  std::string source;  // the variables it came from, e.g. "RANK/WORLD_SIZE (torchrun)"
};

// Reads rank and world size from the launchers' variables, first match wins:
//   OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI mpirun), PMI_RANK/PMI_SIZE (MPICH,
//   Intel MPI, srun --mpi=pmi2), RANK/WORLD_SIZE (torchrun), SLURM_ARRAY_TASK_ID with
//   SLURM_ARRAY_TASK_COUNT or SLURM_ARRAY_TASK_MIN/MAX(/STEP) (a Slurm job array),
//   SLURM_PROCID/SLURM_NTASKS (srun).
// nullopt when none is set. A malformed or inconsistent value (rank >= world, world < 1, one of a
// pair missing) throws Error(Usage) naming the variables. `getenv` is for tests.
std::optional<ShardInfo> shard_from_environment(const std::function<const char*(const char*)>& getenv_fn = nullptr);

// "RANK/WORLD" as given to --shard; Error(Usage) otherwise.
ShardInfo parse_shard(const std::string& text);

// The folder of one shard inside the --out folder: "shard-<rank>-of-<world>".
std::string shard_dir_name(const ShardInfo& shard);

// The indices of the cases of `total` that this shard runs, ascending.
inline bool shard_owns(const ShardInfo& shard, std::size_t case_index) {
  return static_cast<int>(case_index % static_cast<std::size_t>(shard.world)) == shard.rank;
}

// An identity of the expanded plan: FNV-1a over the case keys in order (hex), so shards of
// different suites, flags or versions of the plan never merge.
std::string plan_fingerprint(const std::vector<Case>& cases);

// The file a shard writes next to its results: {"rank", "world", "plan", "cases", "source"}.
inline constexpr const char* kShardFile = "shard.json";

struct MergeOptions {
  std::vector<std::filesystem::path> shards;  // shard folders (or a folder that holds shard-*-of-*)
  std::filesystem::path out_dir;
  bool force = false;  // overwrite results already in out_dir
};

struct MergeOutcome {
  RunHeader header;
  std::vector<ResultRow> rows;  // in plan order
  std::size_t shards = 0;
  std::vector<std::string> warnings;
};

// Checks that the shards come from one plan (same fingerprint and world size, each rank once)
// and together hold every case of it exactly once, then writes results.jsonl, .csv, .json,
// summary.md and suite.json into out_dir (each atomically), rows in the plan's order. Any
// refusal is one Error(Usage) line: a missing case (with the shard that should hold it and how
// to finish it), a duplicate, shards of different plans, a missing rank.
MergeOutcome merge_shards(const MergeOptions& options);

}  // namespace attnsuite::bench
