#include "tune/backend_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "attnsuite/error.hpp"
#include "core/atomic_file.hpp"

namespace attnsuite::tune {

namespace fs = std::filesystem;

namespace {

constexpr int kCacheVersion = 1;

int power_of_two_at_least(int n) {
  int p = 1;
  while (p < n && p < (1 << 30)) p <<= 1;
  return p;
}

std::string class_of(std::string_view dtype, std::string_view layout, int head_dim, int head_dim_v, bool causal,
                     int window_left, int window_right, int heads_q, int heads_kv, int seq_q, int seq_kv) {
  std::string dims = head_dim_v > 0 && head_dim_v != head_dim ? fmt::format("d{}/{}", head_dim, head_dim_v)
                                                              : fmt::format("d{}", head_dim);
  std::string mask = causal ? "causal" : "full";
  if (window_left >= 0 || window_right >= 0) mask += fmt::format(" window{},{}", window_left, window_right);
  return fmt::format("{} {} {} {} {} q{} k{}", dtype, layout, dims, mask, heads_q == heads_kv ? "mha" : "gqa",
                     power_of_two_at_least(seq_q), power_of_two_at_least(seq_kv));
}

// The class without its lengths, and the log2 of the lengths ("... q2048 k4096" -> 11, 12).
struct SplitClass {
  std::string stem;
  int log_q = 0, log_k = 0;
};

std::optional<SplitClass> split_class(const std::string& text) {
  const auto k_at = text.rfind(" k");
  const auto q_at = k_at == std::string::npos ? std::string::npos : text.rfind(" q", k_at - 1);
  if (q_at == std::string::npos) return std::nullopt;
  try {
    const double q = std::stod(text.substr(q_at + 2, k_at - q_at - 2));
    const double k = std::stod(text.substr(k_at + 2));
    if (!(q >= 1) || !(k >= 1)) return std::nullopt;
    return SplitClass{text.substr(0, q_at), static_cast<int>(std::lround(std::log2(q))),
                      static_cast<int>(std::lround(std::log2(k)))};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

nlohmann::json* machine_entry(nlohmann::json& cache, const MachineKey& key, bool create) {
  auto& machines = cache["machines"];
  for (auto& m : machines)
    if (m.value("device", "") == key.device && m.value("driver", "") == key.driver) return &m;
  if (!create) return nullptr;
  machines.push_back({{"device", key.device}, {"driver", key.driver}, {"classes", nlohmann::json::object()}});
  return &machines.back();
}

const nlohmann::json* find_machine(const nlohmann::json& cache, const MachineKey& key) {
  const auto machines = cache.find("machines");
  if (machines == cache.end() || !machines->is_array()) return nullptr;
  for (const auto& m : *machines)
    if (m.is_object() && m.value("device", "") == key.device && m.value("driver", "") == key.driver) return &m;
  return nullptr;
}

std::vector<std::string> order_of(const nlohmann::json& tokens_per_s) {
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [name, value] : tokens_per_s.items())
    if (value.is_number()) ranked.emplace_back(value.get<double>(), name);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::vector<std::string> order;
  for (const auto& [value, name] : ranked) order.push_back(name);
  return order;
}

}  // namespace

fs::path default_cache_path() {
  const auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
  };
  if (const std::string dir = env("ATTNSUITE_CACHE_DIR"); !dir.empty()) return fs::path(dir) / "backends.json";
  if (const std::string dir = env("XDG_CACHE_HOME"); !dir.empty()) return fs::path(dir) / "attnsuite" / "backends.json";
  if (const std::string home = env("HOME"); !home.empty())
    return fs::path(home) / ".cache" / "attnsuite" / "backends.json";
  return fs::path(".attnsuite-cache") / "backends.json";
}

std::string shape_class(const AttentionProblem& p) {
  return class_of(to_string(p.dtype), to_string(p.layout), p.head_dim, p.dim_v(), p.causal, p.window_left,
                  p.window_right, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv);
}

int merge_tuning(nlohmann::json& cache, const nlohmann::json& header, const nlohmann::json& tuning,
                 const std::string& source, const std::string& updated) {
  if (!cache.is_object()) cache = nlohmann::json::object();
  cache["version"] = kCacheVersion;
  if (!cache.contains("machines") || !cache["machines"].is_array()) cache["machines"] = nlohmann::json::array();
  if (!tuning.is_array()) return 0;
  struct Sum {
    double log_sum = 0;
    int count = 0;
    bool feasible = true;
  };
  // machine -> class -> backend -> geometric-mean accumulator
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::map<std::string, Sum>>> found;
  for (const auto& entry : tuning) {
    if (!entry.is_object()) continue;
    const std::string device = entry.value("device", "");
    const bool cpu = device == "cpu";
    const MachineKey key = cpu ? MachineKey{header.value("cpu_model", ""), ""}
                               : MachineKey{header.value("gpu_name", ""), header.value("gpu_driver", "")};
    if (key.device.empty()) continue;
    const std::string cls =
        class_of(entry.value("dtype", ""), entry.value("layout", "bshd"), entry.value("head_dim", 0),
                 entry.value("head_dim_v", 0), entry.value("causal", false), entry.value("window_left", -1),
                 entry.value("window_right", -1), entry.value("heads_q", 0), entry.value("heads_kv", 0),
                 entry.value("seq_q", 0), entry.value("seq_kv", 0));
    Sum& sum = found[{key.device, key.driver}][cls][entry.value("backend", "")];
    const auto search = entry.find("search");
    const nlohmann::json* best = nullptr;
    if (search != entry.end() && search->is_object()) {
      const auto b = search->find("best");
      if (b != search->end() && b->is_object()) best = &*b;
    }
    const auto tokens = best != nullptr ? best->find("tokens_per_s") : entry.end();
    if (best == nullptr || tokens == best->end() || !tokens->is_number() || !(tokens->get<double>() > 0)) {
      sum.feasible = false;  // a shape of the class it could not run: not correct for the class
      continue;
    }
    sum.log_sum += std::log(tokens->get<double>());
    ++sum.count;
  }
  int classes = 0;
  for (const auto& [machine, by_class] : found) {
    nlohmann::json& m = *machine_entry(cache, {machine.first, machine.second}, true);
    if (!m.contains("classes") || !m["classes"].is_object()) m["classes"] = nlohmann::json::object();
    for (const auto& [cls, by_backend] : by_class) {
      nlohmann::json& c = m["classes"][cls];
      if (!c.is_object()) c = nlohmann::json::object();
      if (!c.contains("tokens_per_s") || !c["tokens_per_s"].is_object()) c["tokens_per_s"] = nlohmann::json::object();
      for (const auto& [backend, sum] : by_backend) {
        if (sum.feasible && sum.count > 0)
          c["tokens_per_s"][backend] = std::exp(sum.log_sum / sum.count);
        else
          c["tokens_per_s"].erase(backend);
      }
      c["order"] = order_of(c["tokens_per_s"]);
      c["source"] = source;
      c["updated"] = updated;
      ++classes;
    }
  }
  return classes;
}

nlohmann::json parse_cache(const std::string& text, const std::string& source) {
  nlohmann::json cache = nlohmann::json::parse(text, nullptr, false);
  if (cache.is_discarded() || !cache.is_object())
    throw Error(ErrorKind::Io, fmt::format("backend cache '{}' is not a JSON object; delete it or fix it", source));
  const auto machines = cache.find("machines");
  if (machines != cache.end() && !machines->is_array())
    throw Error(ErrorKind::Io, fmt::format("backend cache '{}': \"machines\" must be an array", source));
  return cache;
}

int update_cache_file(const fs::path& path, const nlohmann::json& header, const nlohmann::json& tuning,
                      const std::string& source) {
  nlohmann::json cache = nlohmann::json::object();
  if (fs::exists(path)) cache = parse_cache(report::read_text_file(path), path.string());
  const int classes = merge_tuning(cache, header, tuning, source, header.value("finished_at", ""));
  if (path.has_parent_path()) report::ensure_writable_directory(path.parent_path());
  report::write_file_atomic(path, cache.dump(2) + "\n");
  return classes;
}

std::optional<CachedOrder> cached_order(const nlohmann::json& cache, const MachineKey& machine,
                                        const AttentionProblem& problem) {
  const nlohmann::json* m = find_machine(cache, machine);
  if (m == nullptr) return std::nullopt;
  const auto classes = m->find("classes");
  if (classes == m->end() || !classes->is_object()) return std::nullopt;
  const auto backends_of = [](const nlohmann::json& c) {
    std::vector<std::string> out;
    const auto order = c.find("order");
    if (order != c.end() && order->is_array())
      for (const auto& name : *order)
        if (name.is_string()) out.push_back(name.get<std::string>());
    return out;
  };
  const std::string wanted = shape_class(problem);
  if (const auto exact = classes->find(wanted); exact != classes->end() && exact->is_object())
    return CachedOrder{backends_of(*exact), wanted};
  const auto target = split_class(wanted);
  if (!target) return std::nullopt;
  int best_distance = std::numeric_limits<int>::max(), best_length = -1;
  std::string best_name;
  for (const auto& [name, c] : classes->items()) {
    const auto candidate = split_class(name);
    if (!candidate || candidate->stem != target->stem || !c.is_object()) continue;
    const int distance = std::abs(candidate->log_q - target->log_q) + std::abs(candidate->log_k - target->log_k);
    const int length = candidate->log_q + candidate->log_k;
    if (distance < best_distance || (distance == best_distance && length > best_length)) {
      best_distance = distance;
      best_length = length;
      best_name = name;
    }
  }
  if (best_name.empty()) return std::nullopt;
  return CachedOrder{backends_of((*classes)[best_name]), best_name};
}

}  // namespace attnsuite::tune
