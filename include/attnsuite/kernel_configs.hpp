// The kernel-config cache: which configuration (tile sizes, stages) of a backend ran fastest,
// per device, driver and problem shape class, as measured by `attnsuite tune --kernels`. The
// backends read it in forward() when no configuration is forced (Backend::kernel_configs).
//
// File: $ATTNSUITE_KERNEL_CACHE if set ("off" turns the cache off), else
// $XDG_CACHE_HOME/attnsuite/kernel-configs.json, else ~/.cache/attnsuite/kernel-configs.json.
// Format (docs/tuning.md): {"format": "attnsuite-kernel-configs", "version": 1, "entries": [
//   {"device": "NVIDIA H200", "driver": "580.159.04", "backend": "flash2",
//    "shape_class": "bf16 d128 causal q4k kv4k bh32", "config": "m64", "measured": {...}}, ...]}
#pragma once

#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "attnsuite/problem.hpp"

namespace attnsuite {

// The shape class a tuned configuration applies to: dtype, head dim, causal or not, and
// power-of-two buckets of seq_q, seq_kv and batch·heads_q (the amount of parallel work), e.g.
// "bf16 d128 causal q4k kv4k bh32". Nearby shapes share a class, so a tune of the suite's cases
// serves the shapes between them.
std::string kernel_shape_class(const AttentionProblem& problem);

struct KernelConfigKey {
  std::string device;       // GPU name, or the CPU model
  std::string driver;       // GPU driver version; empty for the CPU
  std::string backend;      // registry name
  std::string shape_class;  // kernel_shape_class()
  auto tie() const { return std::tie(device, driver, backend, shape_class); }
  bool operator<(const KernelConfigKey& other) const { return tie() < other.tie(); }
};

class KernelConfigCache {
 public:
  struct Entry {
    std::string config;
    nlohmann::json measured;  // what the tuner saw: {config: median ms, ...}, the date, the case
  };

  // The cache the backends read, loaded on first use from default_path(). A file that cannot
  // be read or is not a valid cache is reported once on stderr and treated as empty: a stale
  // cache must never stop a benchmark.
  static KernelConfigCache& global();
  // The path described above; empty when $ATTNSUITE_KERNEL_CACHE is "off".
  static std::filesystem::path default_path();

  // Parses a cache document; Error(Usage) naming `source` and what is wrong.
  static KernelConfigCache from_json(const nlohmann::json& document, std::string_view source);
  // Reads a cache file; a missing file is an empty cache, anything else wrong is Error(Usage).
  static KernelConfigCache load(const std::filesystem::path& path);
  nlohmann::ordered_json to_json() const;

  std::optional<std::string> lookup(const KernelConfigKey& key) const;
  void set(const KernelConfigKey& key, Entry entry);
  std::size_t size() const;
  // Replaces the contents (the global cache after a tune wrote its file).
  void assign(const KernelConfigCache& other);

  KernelConfigCache() = default;
  KernelConfigCache(const KernelConfigCache& other) : entries_(other.copy()) {}
  KernelConfigCache& operator=(const KernelConfigCache& other) {
    if (this != &other) assign(other);
    return *this;
  }

 private:
  std::map<KernelConfigKey, Entry> copy() const;
  mutable std::mutex mutex_;
  std::map<KernelConfigKey, Entry> entries_;
};

}  // namespace attnsuite
