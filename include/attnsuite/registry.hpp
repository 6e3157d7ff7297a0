// One registry by name, used by the CLI, the tests, the benchmarks and Python alike.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/backend.hpp"

namespace attnsuite {

class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Backend>()>;

  // The process-wide registry with every backend built into this library.
  static Registry& global();

  void add(std::string name, Factory factory);
  bool contains(std::string_view name) const;
  // Throws Error(Usage): "unknown backend 'x'; available: a, b, c".
  Backend& find(std::string_view name);
  std::vector<std::string> names() const;

 private:
  struct Entry {
    std::string name;
    Factory factory;
    std::unique_ptr<Backend> instance;  // created on first use
  };
  std::vector<Entry> entries_;
};

// Adds the backends compiled into this build (CPU always; CUDA and peers when built).
void register_builtin_backends(Registry& registry);

}  // namespace attnsuite
