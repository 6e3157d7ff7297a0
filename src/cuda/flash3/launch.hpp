// Host entry point of the flash3 kernels (no CUDA headers: included by host code).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "attnsuite/dtype.hpp"
#include "cuda/common/kernel_params.hpp"
#include "cuda/common/pointer_range.hpp"
#include "cuda/flash3/params.hpp"
#include "cuda/hopper/work_order.hpp"

namespace attnsuite::cuda::flash3 {

// Head dims with a compiled kernel, for supports() and error messages.
inline constexpr int kSupportedHeadDims[] = {64, 128, 256};

// Runs the forward for params on `stream` (a cudaStream_t): builds (or finds cached) the TMA
// descriptors of Q, K and V, then launches. Throws Error(Unsupported) for a (dtype, head dim)
// without a kernel, listing those that have one.
void launch_forward(const Params& params, DType dtype, void* stream);

// The forward with its works in `order` (hopper/scheduler.cuh; flash3.cpp's plan chooses it, or
// backend option forward_order) on the tiles of kernel config `config` ("default": the head dim's
// default tiles; m192's 192-row tiles at d64), where launch.cu's table has that kernel
// (has_ordered_kernel; measured_only: one that ran on a GPU, as the built-in order needs;
// ordered_kernels lists them, e.g. "m192 at head dim 64, the default tiles at head dim 128");
// else Error(Internal): plan() asks first.
bool has_ordered_kernel(hopper::WorkOrder order, int head_dim, std::string_view config, bool measured_only = false);
std::string ordered_kernels(hopper::WorkOrder order);
void launch_forward_ordered(const Params& params, DType dtype, hopper::WorkOrder order, std::string_view config,
                            void* stream);
// "the default tiles" for "default", else the config's name (for messages).
std::string describe_tiles(std::string_view config);

// flash3's tile configs: kernel configs with a kernel for one head dim whose tiles are not the
// default's 128 × 128 (and so take no sparge block list). One table (launch.cu) holds them with
// their kernels; a new one is a traits.cuh config, its instantiation TUs and a row there.
struct TileConfig {
  std::string_view name;   // the kernel config's name
  int head_dim;            // the one head dim it has a kernel for
  std::string_view tiles;  // what its tiles are, for messages
};
// In the order Flash3Schedule lists them: m192 (three consumer warpgroups, 192-row Q tiles; d64),
// m192-fmaexp (m192 with 1/8 of the exponentials on the FMA pipe; opt-in), n176 (176-key K/V tiles;
// d128), n80 (80-key K/V tiles; d256). Each runs the v2 schedule whatever params.serial_schedule
// says.
using TileConfigs = PointerRange<TileConfig>;
TileConfigs tile_configs();

// The forward with tile_configs()[index]. Throws Error(Unsupported) for another head dim or dtype.
void launch_forward_tile_config(std::size_t index, const Params& params, DType dtype, void* stream);

// Head dims with a compiled backward (BackwardConfig: dQ's tile splits into two 64 × 64 tiles).
inline constexpr int kBackwardHeadDims[] = {64, 128};

// The backward's variant, from the backend options. epilogue_bytes: how dK and dV are stored, 4
// or 16 bytes a lane (16: after a transpose within each quad); 0: the head dim's default, 4 at d64,
// 16 at d128 (measured, docs/kernels/flash3-backward.md; 16 at d64 is experimental: not yet run on
// a GPU).
// grouped_heads: the grid's key tiles of 4 heads interleaved (a group's longest causal CTAs first:
// the default order, built with the default epilogue only); false: head-major
// (backward_order=head-major, or an explicit backward_epilogue).
struct BackwardVariant {
  int epilogue_bytes = 0;
  bool grouped_heads = false;
  bool vector_preprocess = true;  // backward_preprocess=vector (the default) or warp
};
constexpr bool wide_epilogue(BackwardVariant variant, int head_dim) {
  return variant.epilogue_bytes == 16 || (variant.epilogue_bytes == 0 && head_dim == 128);
}
// Whether the variant has kernels: the grouped order is built with the default epilogue only.
constexpr bool backward_variant_built(BackwardVariant variant) {
  return !variant.grouped_heads || variant.epilogue_bytes == 0;
}

// The backward for params on `stream`: dq, dk, dv from q, k, v, o, d_o and the forward's lse, with
// the workspace pieces set (common/backward_workspace.hpp: dQ summed in fp32 there). Throws
// Error(Unsupported) for a (dtype, head dim, variant) without a kernel.
void launch_backward(const BackwardParams& params, DType dtype, BackwardVariant variant, void* stream);

}  // namespace attnsuite::cuda::flash3
