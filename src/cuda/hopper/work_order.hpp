// The orders in which a Hopper kernel's CTAs take their works (host and device: a kernel's traits
// name one, the host chooses it). The schedules are in scheduler.cuh.
#pragma once

namespace attnsuite::cuda::hopper {

// HeadMajor: each head's query tiles in a row, the longest first (one CTA per work, or
// PersistentSchedule); LongestFirst: bands of one query tile over every head, the longest band
// first (PersistentLongestFirstSchedule); Paired: units of a head's longest and shortest query
// tiles, head-major (PersistentPairedSchedule).
enum class WorkOrder { HeadMajor, LongestFirst, Paired };

// The paired orders' units of a problem of q_tiles query tiles over heads_batch (q head, batch)
// pairs: a head's query tiles two by two, the middle one alone when q_tiles is odd.
constexpr long long paired_units(int q_tiles, int heads_batch) {
  return static_cast<long long>(heads_batch) * ((q_tiles + 1) / 2);
}

}  // namespace attnsuite::cuda::hopper
