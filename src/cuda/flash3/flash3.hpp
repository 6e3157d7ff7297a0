#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/backend.hpp"
#include "cuda/flash3/launch.hpp"

namespace attnsuite::cuda {

// `flash3`: the sm_90a (Hopper) kernel. Built and registered only with -DATTNSUITE_FLASH3=ON.
std::unique_ptr<Backend> make_flash3_backend();

// `flash3-fp8`: the e4m3 variant (bf16 in, per-tensor quantization pre-pass, bf16 out); same build option.
std::unique_ptr<Backend> make_flash3_fp8_backend();

// "<backend> needs sm_90 (Hopper); this GPU is sm_XY" unless the current device is sm_90.
Support supports_hopper(std::string_view backend);

// The consumer schedule and tiles of flash3 and flash3-fp8 as kernel configs
// (docs/kernels/flash3.md): "default" = v2 (intra-warpgroup overlap + ping-pong, 128 × 128
// tiles at d64/d128) on persistent CTAs for unmasked problems (v4); "v1" = the serial first
// version; for flash3 only, "grid" = v2 with one CTA per work tile (as up to v3, and what every
// masked problem runs), "m192" = v2 on three consumer warpgroups (192-row Q tiles, head dim 64)
// "m192-fmaexp" = m192 with 1/8 of the softmax's exponentials on the FMA pipe instead of MUFU
// (opt-in, never the built-in choice: 0.96x m192 on the H100, docs/kernels/flash3.md), "n176" = v2 on 176-key K/V
// tiles (head dim 128) and "n80" = v2 on 80-key K/V tiles (head dim 256). A plan runs the one
// choose_kernel_config picks: PlanOptions::kernel_config, else the kernel-config cache's, else the
// built-in choice, which names() lists first ("m192" at d64, causal problems paired on persistent
// CTAs (flash3.cpp's plan); "n176" at d128 dense up to seq_kv 8192 and causal above seq_q 8192
// without a left window; "n80" at d256 dense from seq_kv 1024 and causal at seq_q <= 512 or >
// 4096; as measured; "default" elsewhere, at d128 causal problems paired).
class Flash3Schedule {
 public:
  // kind Tile: tile_configs()[tile] (launch.hpp).
  enum class Kind { Default, V1, Grid, Tile };
  struct Choice {
    Kind kind = Kind::Default;
    std::size_t tile = 0;
  };
  // with_tile_configs: the backend has "grid" and the m192 and n176 kernels (flash3 does,
  // flash3-fp8 does not).
  explicit Flash3Schedule(bool with_tile_configs = false) : with_tile_configs_(with_tile_configs) {}
  // The configs for `problem`: the built-in choice first, then the others in the order default,
  // v1, grid, then the tile configs in their table's order; a tile config only at the head dim of
  // its kernel.
  std::vector<std::string> names(const AttentionProblem& problem) const;
  // The schedule of a config that names() lists.
  static Choice parse(std::string_view config);

 private:
  static const flash3::TileConfig* tile_config(std::string_view config);  // null: not a tile config
  bool has(std::string_view config, const AttentionProblem& problem) const;
  std::string builtin(const AttentionProblem& problem) const;
  bool with_tile_configs_ = false;
};

// What flash3 and flash3-fp8 share as backends: their kernel configs (Flash3Schedule), keyed
// by the GPU, and the rules past the problem's own.
class Flash3FamilyBackend : public IdentifiedBackend {
 public:
  Flash3FamilyBackend(BackendIdentity identity, bool with_tile_configs)
      : IdentifiedBackend(std::move(identity)), schedule_(with_tile_configs) {}
  std::vector<std::string> kernel_configs(const AttentionProblem& problem) const final;
  KernelConfigKey kernel_config_key(const AttentionProblem& problem, const PlanOptions& options) const final;

 protected:
  // The head dim one of `head_dims` (supports_shape), a CUDA device, sm_90.
  Support supports_kernel(const AttentionProblem& problem, std::span<const int> head_dims) const;
  // Throws Error(Unsupported) "<name>: <q|k|v|o> cannot be <read_how>: <why>" unless each of Q,
  // K, V, O has a 16-byte aligned base and strides (flash3::tma_layout_problem; Q, K, V of
  // qkv_element_bytes-byte elements, 1 for e4m3; O 16-bit).
  void check_16_byte_layout(const AttentionArgs& args, std::string_view read_how, int qkv_element_bytes = 2) const;
  // The same rule for any views: (name, view, element bytes) each.
  struct NamedView {
    const char* name;
    const TensorView* view;
    int element_bytes = 2;
  };
  void check_16_byte_views(std::initializer_list<NamedView> views, std::string_view read_how) const;

 private:
  Flash3Schedule schedule_;
};

}  // namespace attnsuite::cuda
