#include "fault/fault.hpp"

#include <fmt/format.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <string>

#include "attnsuite/error.hpp"

namespace attnsuite::fault {

namespace {

struct SiteState {
  std::atomic<std::uint64_t> events{0};
  std::atomic<std::uint64_t> target{0};  // 0: unarmed
  std::atomic<std::uint64_t> injected{0};
};

SiteState& state(Site site) {
  static SiteState host_alloc, cuda_call;
  return site == Site::HostAlloc ? host_alloc : cuda_call;
}

void reset(Site site, std::uint64_t target) {
  SiteState& s = state(site);
  s.target.store(0);
  s.events.store(0);
  s.injected.store(0);
  s.target.store(target);
}

}  // namespace

void arm(Site site, std::uint64_t nth) {
  ATTNSUITE_REQUIRE(nth >= 1, "fault injection: the failing event is counted from 1");
  reset(site, nth);
}

void disarm() {
  reset(Site::HostAlloc, 0);
  reset(Site::CudaCall, 0);
}

std::uint64_t events(Site site) { return state(site).events.load(); }
std::uint64_t injected(Site site) { return state(site).injected.load(); }

std::uint64_t fail_here(Site site) noexcept {
  SiteState& s = state(site);
  const std::uint64_t event = s.events.fetch_add(1, std::memory_order_relaxed) + 1;
  const std::uint64_t target = s.target.load(std::memory_order_relaxed);
  if (target == 0 || event != target) return 0;
  s.injected.fetch_add(1);
  return event;
}

void arm_from_spec(std::string_view spec) {
  const auto bad = [&] {
    return Error(ErrorKind::Usage, fmt::format("ATTNSUITE_FAULT='{}' is not allowed: alloc:N or cuda:N (N >= 1), "
                                               "comma-separated for both",
                                               spec));
  };
  std::uint64_t nth_of[2] = {0, 0};  // parsed first, armed only when the whole spec is good
  std::string_view rest = spec;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) throw bad();
    const std::string_view name = item.substr(0, colon), number = item.substr(colon + 1);
    Site site;
    if (name == "alloc") {
      site = Site::HostAlloc;
    } else if (name == "cuda") {
      site = Site::CudaCall;
    } else {
      throw bad();
    }
    std::uint64_t nth = 0;
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), nth);
    if (error != std::errc() || end != number.data() + number.size() || nth == 0) throw bad();
    if (nth_of[static_cast<int>(site)] != 0) throw bad();
    nth_of[static_cast<int>(site)] = nth;
  }
  for (const Site site : {Site::HostAlloc, Site::CudaCall})
    if (nth_of[static_cast<int>(site)] != 0) arm(site, nth_of[static_cast<int>(site)]);
}

void arm_from_environment() {
  const char* spec = std::getenv("ATTNSUITE_FAULT");
  if (spec != nullptr && *spec != '\0') arm_from_spec(spec);
}

}  // namespace attnsuite::fault
