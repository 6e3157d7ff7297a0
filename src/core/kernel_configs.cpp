#include "attnsuite/kernel_configs.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "attnsuite/error.hpp"
#include "core/json_limits.hpp"

namespace attnsuite {
namespace {

constexpr std::string_view kFormat = "attnsuite-kernel-configs";
constexpr int kVersion = 1;

// 1000 → "1k", 4096 → "4k", 96 → "128": the power of two at or above the value.
std::string bucket(std::int64_t value) {
  const std::uint64_t rounded = std::bit_ceil(static_cast<std::uint64_t>(value < 1 ? 1 : value));
  if (rounded >= (1u << 20)) return fmt::format("{}M", rounded >> 20);
  if (rounded >= 1024) return fmt::format("{}k", rounded >> 10);
  return fmt::format("{}", rounded);
}

const nlohmann::json& field(const nlohmann::json& object, const char* name, std::string_view source,
                            std::size_t index) {
  if (!object.contains(name) || !object[name].is_string())
    throw Error(ErrorKind::Usage,
                fmt::format("kernel-config cache {}: entry {} has no string '{}'", source, index, name));
  return object[name];
}

}  // namespace

std::string kernel_shape_class(const AttentionProblem& problem) {
  std::string mask = problem.causal ? "causal" : "dense";
  if (problem.window_left >= 0 || problem.window_right >= 0) mask += "-window";
  return fmt::format("{} d{} {} q{} kv{} bh{}", to_string(problem.dtype), problem.head_dim, mask, bucket(problem.seq_q),
                     bucket(problem.seq_kv), bucket(static_cast<std::int64_t>(problem.batch) * problem.heads_q));
}

std::filesystem::path KernelConfigCache::default_path() {
  if (const char* path = std::getenv("ATTNSUITE_KERNEL_CACHE"); path != nullptr && *path != '\0') {
    if (std::string_view(path) == "off") return {};
    return path;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return std::filesystem::path(xdg) / "attnsuite" / "kernel-configs.json";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::filesystem::path(home) / ".cache" / "attnsuite" / "kernel-configs.json";
  return {};
}

KernelConfigCache& KernelConfigCache::global() {
  static KernelConfigCache* cache = [] {
    auto* loaded = new KernelConfigCache();
    const std::filesystem::path path = default_path();
    if (path.empty()) return loaded;
    try {
      loaded->assign(load(path));
    } catch (const std::exception& error) {
      fmt::print(stderr, "attnsuite: warning: {}; running with the built-in kernel configurations\n", error.what());
    }
    return loaded;
  }();
  return *cache;
}

KernelConfigCache KernelConfigCache::from_json(const nlohmann::json& document, std::string_view source) {
  if (!document.is_object() || document.value("format", "") != kFormat)
    throw Error(ErrorKind::Usage, fmt::format("kernel-config cache {}: not an attnsuite kernel-config file "
                                              "(\"format\": \"{}\" missing)",
                                              source, kFormat));
  if (!document.contains("version") || !document["version"].is_number_integer() ||
      document["version"].get<std::int64_t>() != kVersion)
    throw Error(ErrorKind::Usage,
                fmt::format("kernel-config cache {}: version {} not supported; allowed: {}", source,
                            document.contains("version") ? document["version"].dump() : "missing", kVersion));
  if (!document.contains("entries") || !document["entries"].is_array())
    throw Error(ErrorKind::Usage, fmt::format("kernel-config cache {}: 'entries' must be an array", source));
  KernelConfigCache cache;
  std::size_t index = 0;
  for (const nlohmann::json& item : document["entries"]) {
    if (!item.is_object())
      throw Error(ErrorKind::Usage, fmt::format("kernel-config cache {}: entry {} is not an object", source, index));
    KernelConfigKey key{field(item, "device", source, index).get<std::string>(),
                        field(item, "driver", source, index).get<std::string>(),
                        field(item, "backend", source, index).get<std::string>(),
                        field(item, "shape_class", source, index).get<std::string>()};
    Entry entry{field(item, "config", source, index).get<std::string>(), item.value("measured", nlohmann::json())};
    cache.entries_[std::move(key)] = std::move(entry);
    ++index;
  }
  return cache;
}

KernelConfigCache KernelConfigCache::load(const std::filesystem::path& path) {
  std::ifstream file(path);
  if (!file) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return {};
    throw Error(ErrorKind::Usage, fmt::format("kernel-config cache {}: cannot be read", path.string()));
  }
  std::stringstream text;
  text << file.rdbuf();
  const auto too_deep = [&] {
    throw Error(ErrorKind::Usage,
                fmt::format("kernel-config cache {}: nested deeper than {} levels", path.string(), kMaxJsonDepth));
  };
  nlohmann::json document = nlohmann::json::parse(text.str(), json_depth_limit(too_deep), /*allow_exceptions=*/false);
  if (document.is_discarded())
    throw Error(ErrorKind::Usage, fmt::format("kernel-config cache {}: not valid JSON", path.string()));
  return from_json(document, path.string());
}

nlohmann::ordered_json KernelConfigCache::to_json() const {
  nlohmann::ordered_json document;
  document["format"] = kFormat;
  document["version"] = kVersion;
  document["entries"] = nlohmann::ordered_json::array();
  std::lock_guard lock(mutex_);
  for (const auto& [key, entry] : entries_) {
    nlohmann::ordered_json item;
    item["device"] = key.device;
    item["driver"] = key.driver;
    item["backend"] = key.backend;
    item["shape_class"] = key.shape_class;
    item["config"] = entry.config;
    item["measured"] = entry.measured;
    document["entries"].push_back(std::move(item));
  }
  return document;
}

std::optional<std::string> KernelConfigCache::lookup(const KernelConfigKey& key) const {
  std::lock_guard lock(mutex_);
  const auto found = entries_.find(key);
  if (found == entries_.end()) return std::nullopt;
  return found->second.config;
}

void KernelConfigCache::set(const KernelConfigKey& key, Entry entry) {
  std::lock_guard lock(mutex_);
  entries_[key] = std::move(entry);
}

std::size_t KernelConfigCache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::map<KernelConfigKey, KernelConfigCache::Entry> KernelConfigCache::copy() const {
  std::lock_guard lock(mutex_);
  return entries_;
}

void KernelConfigCache::assign(const KernelConfigCache& other) {
  auto entries = other.copy();
  std::lock_guard lock(mutex_);
  entries_ = std::move(entries);
}

}  // namespace attnsuite
