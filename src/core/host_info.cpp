#include "core/host_info.hpp"

#include <cpuid.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace attnsuite {

namespace {
std::size_t meminfo_kib(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::size_t value = 0;
  std::string unit;
  while (in >> name >> value >> unit)
    if (name == key + ":") return value;
  return 0;
}

std::size_t read_size_file(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty()) return 0;
  std::size_t multiplier = 1;
  const char suffix = text.back();
  if (suffix == 'K') multiplier = 1024;
  if (suffix == 'M') multiplier = 1024 * 1024;
  if (multiplier != 1) text.pop_back();
  try {
    return std::stoull(text) * multiplier;
  } catch (...) {
    return 0;
  }
}

HostInfo read_host_info() {
  HostInfo info;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) info.hostname = name;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      info.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  }
  if (info.cpu_model.empty()) info.cpu_model = "unknown CPU";
  info.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::ostringstream simd;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) simd << "avx512f ";
  if (__builtin_cpu_supports("avx2")) simd << "avx2 ";
  if (__builtin_cpu_supports("fma")) simd << "fma ";
  // clang 14's __builtin_cpu_supports knows no "f16c": CPUID leaf 1, ECX bit 29.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0) simd << "f16c ";
  info.simd = simd.str();
  if (!info.simd.empty()) info.simd.pop_back();
  for (int index = 3; index >= 0 && info.llc_bytes == 0; --index) {
    const std::string path = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size";
    info.llc_bytes = read_size_file(path.c_str());
  }
  info.total_memory_bytes = meminfo_kib("MemTotal") * 1024;
  return info;
}
}  // namespace

std::size_t HostInfo::available_memory_bytes() const { return meminfo_kib("MemAvailable") * 1024; }

const HostInfo& host_info() {
  static const HostInfo info = read_host_info();
  return info;
}

}  // namespace attnsuite
