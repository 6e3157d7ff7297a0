// Dispatch from the run-time (dtype, head dim) to the compiled instantiations.
#include <fmt/format.h>

#include <array>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

#include "attnsuite/error.hpp"
#include "cuda/common/dispatch.hpp"
#include "cuda/flash3/launch.hpp"
#include "cuda/flash3/run_forward.cuh"
#include "cuda/flash3/traits.cuh"
#include "cuda/sparge/launch.hpp"

namespace attnsuite::cuda::flash3 {
namespace {

// The block-sparse lists (Params::block_index) count in this kernel's tiles.
template <class Kernel>
constexpr bool tiles_are_hopper_blocks() {
  return Kernel::kTileM == sparge::kHopperTiles.m && Kernel::kTileN == sparge::kHopperTiles.n &&
         Kernel::kRowsPerConsumer == sparge::kHopperTiles.rows_per_warp;
}
static_assert(tiles_are_hopper_blocks<Config<__nv_bfloat16, 64>::Kernel>() &&
                  tiles_are_hopper_blocks<Config<__nv_bfloat16, 128>::Kernel>(),
              "sparge's Hopper blocks (sparge::kHopperTiles) must be flash3's d64/d128 tiles");

// The tile configs (launch.hpp) with their kernels, one row each.
using RunForward = void (*)(const Params&, cudaStream_t);
struct TileConfigRow {
  TileConfig config;
  RunForward fp16, bf16;
};
constexpr TileConfigRow kTileConfigTable[] = {
    {{"m192", 64, "192-row tiles"},
     &run_forward_config<ConfigM192, __half>,
     &run_forward_config<ConfigM192, __nv_bfloat16>},
    {{"m192-fmaexp", 64, "192-row tiles"},
     &run_forward_config<ConfigM192FmaExp2, __half>,
     &run_forward_config<ConfigM192FmaExp2, __nv_bfloat16>},
    {{"n176", 128, "176-key tiles"},
     &run_forward_config<ConfigN176, __half>,
     &run_forward_config<ConfigN176, __nv_bfloat16>},
    {{"n80", 256, "80-key tiles"},
     &run_forward_config<ConfigN80, __half>,
     &run_forward_config<ConfigN80, __nv_bfloat16>},
};

// The kernels with their works in another order than head-major (hopper/scheduler.cuh), one row
// each. measured: the kernel passed its GPU tests and was measured, so the built-in order may
// choose it; the others run only when an option asks for them.
struct OrderRow {
  hopper::WorkOrder order;
  int head_dim;
  std::string_view config;  // "default" (the head dim's default tiles) or a tile config's name
  bool measured;
  RunForward fp16, bf16;
};
constexpr OrderRow kOrderTable[] = {
    {hopper::WorkOrder::LongestFirst, 64, "m192", true, &run_forward_config<ConfigM192LongestFirst, __half>,
     &run_forward_config<ConfigM192LongestFirst, __nv_bfloat16>},
    {hopper::WorkOrder::LongestFirst, 64, "default", true, &run_forward_config<ConfigD64LongestFirst, __half>,
     &run_forward_config<ConfigD64LongestFirst, __nv_bfloat16>},
    {hopper::WorkOrder::LongestFirst, 128, "default", true, &run_forward_config<ConfigD128LongestFirst, __half>,
     &run_forward_config<ConfigD128LongestFirst, __nv_bfloat16>},
    {hopper::WorkOrder::Paired, 64, "m192", true, &run_forward_config<ConfigM192Paired, __half>,
     &run_forward_config<ConfigM192Paired, __nv_bfloat16>},
    {hopper::WorkOrder::Paired, 128, "default", true, &run_forward_config<ConfigD128Paired, __half>,
     &run_forward_config<ConfigD128Paired, __nv_bfloat16>},
    {hopper::WorkOrder::Paired, 256, "default", true, &run_forward_config<ConfigD256Paired, __half>,
     &run_forward_config<ConfigD256Paired, __nv_bfloat16>},
};

template <std::size_t... kIndex>
constexpr std::array<TileConfig, sizeof...(kIndex)> configs_of(std::index_sequence<kIndex...>) {
  return {kTileConfigTable[kIndex].config...};
}

}  // namespace

TileConfigs tile_configs() {
  static constexpr auto kConfigs = configs_of(std::make_index_sequence<std::size(kTileConfigTable)>{});
  return {kConfigs.data(), kConfigs.size()};
}

void launch_forward_tile_config(std::size_t index, const Params& params, DType dtype, void* stream) {
  const TileConfigRow& row = kTileConfigTable[index];
  if (params.head_dim != row.config.head_dim) {
    throw Error(ErrorKind::Unsupported, fmt::format("flash3: kernel config '{}' exists for head dim {} only, not {}",
                                                    row.config.name, row.config.head_dim, params.head_dim));
  }
  if (params.block_index != nullptr) {
    throw Error(ErrorKind::Internal, fmt::format("flash3: kernel config '{}' ({}) takes no 128 × 128 block list",
                                                 row.config.name, row.config.tiles));
  }
  dispatch_16bit(dtype, "flash3", [&](auto element) {
    constexpr bool kHalf = std::is_same_v<typename decltype(element)::type, __half>;
    (kHalf ? row.fp16 : row.bf16)(params, static_cast<cudaStream_t>(stream));
  });
}

void launch_forward(const Params& params, DType dtype, void* stream) {
  if (params.block_index != nullptr && params.head_dim != 64 && params.head_dim != 128) {
    throw Error(ErrorKind::Internal, fmt::format("flash3: block-sparse at head dim {}; its tiles are 128 × 128 at "
                                                 "head dims 64 and 128 only",
                                                 params.head_dim));
  }
  dispatch_16bit(dtype, "flash3", [&](auto element) {
    dispatch_head_dim<64, 128, 256>(params.head_dim, "flash3", [&](auto head_dim) {
      run_forward<typename decltype(element)::type, decltype(head_dim)::value>(params,
                                                                               static_cast<cudaStream_t>(stream));
    });
  });
}

namespace {
const OrderRow* ordered_row(hopper::WorkOrder order, int head_dim, std::string_view config) {
  for (const OrderRow& row : kOrderTable)
    if (row.order == order && row.head_dim == head_dim && row.config == config) return &row;
  return nullptr;
}
}  // namespace

std::string describe_tiles(std::string_view config) {
  return config == "default" ? std::string("the default tiles") : std::string(config);
}

bool has_ordered_kernel(hopper::WorkOrder order, int head_dim, std::string_view config, bool measured_only) {
  const OrderRow* row = ordered_row(order, head_dim, config);
  return row != nullptr && (row->measured || !measured_only);
}

std::string ordered_kernels(hopper::WorkOrder order) {
  std::string built;
  for (const OrderRow& row : kOrderTable) {
    if (row.order != order) continue;
    built += fmt::format("{}{} at head dim {}", built.empty() ? "" : ", ", describe_tiles(row.config), row.head_dim);
  }
  return built;
}

void launch_forward_ordered(const Params& params, DType dtype, hopper::WorkOrder order, std::string_view config,
                            void* stream) {
  if (params.block_index != nullptr) throw Error(ErrorKind::Internal, "flash3: a forward_order takes no block lists");
  const OrderRow* row = ordered_row(order, params.head_dim, config);
  if (row == nullptr) {
    throw Error(ErrorKind::Internal,
                fmt::format("flash3: no kernel of this forward_order for {} at head dim {} (built: "
                            "{})",
                            describe_tiles(config), params.head_dim, ordered_kernels(order)));
  }
  dispatch_16bit(dtype, "flash3", [&](auto element) {
    constexpr bool kHalf = std::is_same_v<typename decltype(element)::type, __half>;
    (kHalf ? row->fp16 : row->bf16)(params, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace attnsuite::cuda::flash3
