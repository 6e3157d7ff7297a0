// The tuner's backend cache: which backends ran a class of problem fastest on a machine, learned
// from `attnsuite tune --batch` and read by `backend="auto"` (attnsuite.attention in Python).
//
// One JSON file (default_cache_path()), keyed by machine (GPU name and driver; for CPU backends
// the CPU model and no driver) and shape class (shape_class()). Each class holds the tokens/s
// of every backend whose tune found a feasible batch (a probe that ran and passed the accuracy
// check: "correct"), and `order`, the backends fastest first. A tune overwrites the figures of
// the backends it measured and keeps the others; backends whose tune found no feasible batch
// are removed from the class. docs/python.md shows the file.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attnsuite/problem.hpp"

namespace attnsuite::tune {

// Where the cache is: $ATTNSUITE_CACHE_DIR/backends.json, else $XDG_CACHE_HOME/attnsuite/...,
// else $HOME/.cache/attnsuite/..., else (no HOME) ./.attnsuite-cache/backends.json.
std::filesystem::path default_cache_path();

struct MachineKey {
  std::string device;  // "NVIDIA H200", or the CPU model for CPU backends
  std::string driver;  // the NVIDIA driver version; empty for the CPU
};

// The shape class of a problem: dtype, layout, head dims, causal, window, MHA or GQA, and the
// sequence lengths rounded up to powers of two, e.g. "bf16 bshd d128 causal gqa q2048 k2048".
// Problems of one class differ only in batch, head count and length within a factor of two.
std::string shape_class(const AttentionProblem& problem);

// Merges a tune's "tuning" array (tune_output.hpp's to_json entries) into `cache` (an empty
// object or a cache file's JSON) for the machines of `header` (a results header: gpu_name,
// gpu_driver, cpu_model). Entries of one class and backend in one tune are combined by the
// geometric mean of their best tokens/s (every backend ran the same shapes). `source` (the
// tune.json path) and `updated` (a time) are recorded per class. Returns the classes updated.
int merge_tuning(nlohmann::json& cache, const nlohmann::json& header, const nlohmann::json& tuning,
                 const std::string& source, const std::string& updated);

// Reads the cache file (a missing file is an empty cache), merges, writes it back atomically.
// Throws Error(Io) for an unreadable or malformed file, naming it.
int update_cache_file(const std::filesystem::path& path, const nlohmann::json& header, const nlohmann::json& tuning,
                      const std::string& source);

// What the cache says for a problem on a machine: the class's backends fastest first, and the
// class they come from. Exact class first; else the class of the machine that differs only in
// its sequence lengths, nearest in log2 of both lengths (ties: the longer). nullopt: no class.
struct CachedOrder {
  std::vector<std::string> backends;
  std::string shape_class;
};
std::optional<CachedOrder> cached_order(const nlohmann::json& cache, const MachineKey& machine,
                                        const AttentionProblem& problem);

// Parses a cache file's text; Error(Io) naming `source` when it is not a cache (wrong types).
nlohmann::json parse_cache(const std::string& text, const std::string& source);

}  // namespace attnsuite::tune
