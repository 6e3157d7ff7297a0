// Dispatch from the run-time (dtype, head dim) to the compiled instantiations.
#include <fmt/format.h>

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

// A tile config (m192, n176): a kernel for one head dim, whose tiles are not sparge's 128 × 128
// blocks.
template <class Run>
void launch_tile_config(const char* config, int head_dim, const char* tiles, const Params& params, DType dtype,
                        Run run) {
  if (params.head_dim != head_dim) {
    throw Error(ErrorKind::Unsupported, fmt::format("flash3: kernel config '{}' exists for head dim {} only, not {}",
                                                    config, head_dim, params.head_dim));
  }
  if (params.block_index != nullptr) {
    throw Error(ErrorKind::Internal,
                fmt::format("flash3: kernel config '{}' ({}) takes no 128 × 128 block list", config, tiles));
  }
  dispatch_16bit(dtype, "flash3", run);
}

}  // namespace

void launch_forward_m192(const Params& params, DType dtype, void* stream) {
  launch_tile_config("m192", 64, "192-row tiles", params, dtype, [&](auto element) {
    run_forward_m192<typename decltype(element)::type>(params, static_cast<cudaStream_t>(stream));
  });
}

void launch_forward_m192_fmaexp(const Params& params, DType dtype, void* stream) {
  launch_tile_config("m192-fmaexp", 64, "192-row tiles", params, dtype, [&](auto element) {
    run_forward_m192_fmaexp<typename decltype(element)::type>(params, static_cast<cudaStream_t>(stream));
  });
}

void launch_forward_n176(const Params& params, DType dtype, void* stream) {
  launch_tile_config("n176", 128, "176-key tiles", params, dtype, [&](auto element) {
    run_forward_n176<typename decltype(element)::type>(params, static_cast<cudaStream_t>(stream));
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

}  // namespace attnsuite::cuda::flash3
