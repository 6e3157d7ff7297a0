// Test-only fault injection: makes the n-th host allocation (every HostBuffer, so every tracked
// CPU buffer) or the n-th checked CUDA call (ATTNSUITE_CUDA_CHECK, DeviceBuffer's cudaMalloc)
// fail, so tests can show that a failure in the middle of a sweep is recorded as a failed case,
// the sweep goes on, and nothing leaks. Armed from a test (arm) or, for the CLI, by the
// environment: ATTNSUITE_FAULT=alloc:N or cuda:N (comma-separated for both).
//
// Unarmed, a site costs one relaxed atomic increment. A room of its own (src/fault/), included
// only by the .cpp files that host a site (core/memory.cpp, cuda/common/check.cpp), the CLI's
// main and the tests, never by a header: tools/check_layers.py keeps it so.
#pragma once

#include <cstdint>
#include <string_view>

namespace attnsuite::fault {

enum class Site { HostAlloc, CudaCall };

// The nth event (1-based) at `site` counted from now fails, once; the site's counter restarts.
void arm(Site site, std::uint64_t nth);
// Both sites unarmed, counters restarted.
void disarm();
// Events seen at `site` since its last arm/disarm (every allocation or call, failed or not).
std::uint64_t events(Site site);
// Failures injected at `site` since its last arm/disarm.
std::uint64_t injected(Site site);

// At a site, before the operation: counts it and returns its event number when it must fail,
// else 0.
std::uint64_t fail_here(Site site) noexcept;

// "alloc:N", "cuda:N" or both comma-separated (N >= 1). Throws Error(Usage) naming the value
// and what is allowed.
void arm_from_spec(std::string_view spec);
// Arms from ATTNSUITE_FAULT when it is set and not empty.
void arm_from_environment();

}  // namespace attnsuite::fault
