// Facts about the host: CPU model, threads, SIMD, caches, memory. Read once.
#pragma once

#include <cstddef>
#include <string>

namespace attnsuite {

struct HostInfo {
  std::string hostname;
  std::string cpu_model;
  int threads = 1;
  std::string simd;           // "avx512f avx2 fma f16c" — what this CPU has
  std::size_t llc_bytes = 0;  // last-level cache
  std::size_t total_memory_bytes = 0;
  std::size_t available_memory_bytes() const;  // MemAvailable, read fresh each call
};

const HostInfo& host_info();

}  // namespace attnsuite
