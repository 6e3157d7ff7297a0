#include "attnsuite/registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <mutex>

#include "attnsuite/error.hpp"

namespace attnsuite {

Registry& Registry::global() {
  static Registry registry;
  static std::once_flag once;
  std::call_once(once, [] { register_builtin_backends(registry); });
  return registry;
}

void Registry::add(std::string name, Factory factory) {
  ATTNSUITE_CHECK(!contains(name), ErrorKind::Internal, fmt::format("backend '{}' registered twice", name));
  entries_.push_back({std::move(name), std::move(factory), nullptr});
}

bool Registry::contains(std::string_view name) const {
  for (const auto& entry : entries_)
    if (entry.name == name) return true;
  return false;
}

Backend& Registry::find(std::string_view name) {
  for (auto& entry : entries_) {
    if (entry.name != name) continue;
    if (!entry.instance) entry.instance = entry.factory();
    return *entry.instance;
  }
  throw Error(ErrorKind::Usage, fmt::format("unknown backend '{}'; available: {}", name, fmt::join(names(), ", ")));
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& entry : entries_) out.push_back(entry.name);
  return out;
}

}  // namespace attnsuite
