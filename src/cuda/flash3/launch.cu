// Dispatch from the run-time (dtype, head dim) to the compiled instantiations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include "attnsuite/error.hpp"
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

template <class Element>
void launch_for_dtype(const Params& params, cudaStream_t stream) {
  switch (params.head_dim) {
    case 64: return run_forward<Element, 64>(params, stream);
    case 128: return run_forward<Element, 128>(params, stream);
    case 256: return run_forward<Element, 256>(params, stream);
    default:
      throw Error(ErrorKind::Unsupported,
                  fmt::format("head dim {} not supported by flash3; allowed: 64, 128, 256", params.head_dim));
  }
}

Error unsupported_dtype(DType dtype) {
  return Error(ErrorKind::Unsupported,
               fmt::format("dtype {} not supported by flash3; allowed: fp16, bf16", to_string(dtype)));
}

// A tile config (m192, n176): a kernel for one head dim, whose tiles are not sparge's 128 × 128
// blocks. run(ElementTag<Element>{}) launches it for the element type (this TU is C++17: no
// std::type_identity).
template <class Element>
struct ElementTag {
  using type = Element;
};
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
  switch (dtype) {
    case DType::F16: return run(ElementTag<__half>{});
    case DType::BF16: return run(ElementTag<__nv_bfloat16>{});
    default: throw unsupported_dtype(dtype);
  }
}

}  // namespace

void launch_forward_m192(const Params& params, DType dtype, void* stream) {
  launch_tile_config("m192", 64, "192-row tiles", params, dtype, [&](auto element) {
    run_forward_m192<typename decltype(element)::type>(params, static_cast<cudaStream_t>(stream));
  });
}

void launch_forward_n176(const Params& params, DType dtype, void* stream) {
  launch_tile_config("n176", 128, "176-key tiles", params, dtype, [&](auto element) {
    run_forward_n176<typename decltype(element)::type>(params, static_cast<cudaStream_t>(stream));
  });
}

void launch_forward(const Params& params, DType dtype, void* stream) {
  auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (params.block_index != nullptr && params.head_dim != 64 && params.head_dim != 128) {
    throw Error(ErrorKind::Internal, fmt::format("flash3: block-sparse at head dim {}; its tiles are 128 × 128 at "
                                                 "head dims 64 and 128 only", params.head_dim));
  }
  switch (dtype) {
    case DType::F16: return launch_for_dtype<__half>(params, cuda_stream);
    case DType::BF16: return launch_for_dtype<__nv_bfloat16>(params, cuda_stream);
    default: throw unsupported_dtype(dtype);
  }
}

}  // namespace attnsuite::cuda::flash3
