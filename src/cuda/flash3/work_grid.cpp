#include "cuda/flash3/work_grid.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"

namespace attnsuite::cuda::flash3 {

int work_grid(Params& launch, int tile_m, hopper::WorkOrder order, std::string_view backend) {
  launch.q_tiles = (launch.seq_q + tile_m - 1) / tile_m;
  const std::int64_t works = std::int64_t{launch.q_tiles} * launch.heads_q * launch.batch;
  // The schedules step a CTA's int work index by the grid size (up to the works themselves), so
  // twice the works must stay an int.
  constexpr std::int64_t kMaxWorks = std::numeric_limits<int>::max() / 2;
  if (works > kMaxWorks) {
    throw Error(ErrorKind::Unsupported,
                fmt::format("{}: {} query tiles × {} heads × batch {} = {} work tiles; at most {}", backend,
                            launch.q_tiles, launch.heads_q, launch.batch, works, kMaxWorks));
  }
  launch.works = static_cast<int>(works);
  int ctas = launch.works;
  if (order == hopper::WorkOrder::Paired)
    ctas = static_cast<int>(hopper::paired_units(launch.q_tiles, launch.heads_q * launch.batch));
  if (launch.persistent) {
    int device = 0, sms = 0;
    ATTNSUITE_CUDA_CHECK(cudaGetDevice(&device));
    ATTNSUITE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    ctas = std::min(ctas, std::max(sms, 1));
  }
  return ctas;
}

}  // namespace attnsuite::cuda::flash3
