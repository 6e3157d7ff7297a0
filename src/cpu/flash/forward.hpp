// cpu-flash's forward, as the backend (flash.cpp) sees it: the tile sizes, the per-thread
// workspace and one entry point per vector ISA (forward_avx2.cpp, forward_avx512.cpp, both
// instantiating forward_kernel.hpp). Everything here is compiled for the build's baseline ISA
// in every file that includes it (simd_target.hpp says why that matters).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "attnsuite/backend.hpp"
#include "attnsuite/memory.hpp"
#include "cpu/common.hpp"

namespace attnsuite::cpu::flash {

// Tile sizes, chosen at run time (`attnsuite tune --kernels` times them; the kernel-config
// cache picks one per CPU and shape class; without an entry, flash.cpp's built-in rule). Each
// pass over a head's K/V serves `query_tile` queries, and that pass is what the kernels do not
// hide: copying a BSHD row costs a page walk (rows are H·D apart). 192 against 96 halved it
// (113 vs 127 ms on B=1 H=16 N=2048 D=64, AVX2), 384 against 192 saves 3–8% more there (CPU
// time per forward, both ISAs, and 4–5% at D=128 and 256) but loses 5% under a causal mask,
// whose diagonal tiles grow with the query tile; 288, and key tiles of 48 or 192, were slower.
// Smaller query tiles make more work items, which pays where a problem has few per thread.
// A thread's tiles: 220 KiB at D=64 with q192-k96, 390 KiB with q384-k96, 1.1 MiB at D=256.
struct TileConfig {
  const char* name;
  int query_tile;  // queries per work item (Br): a multiple of kQueryGranule
  int key_tile;    // keys per tile (Bc): a multiple of every ISA's score block (6 and 12 keys)
};
inline constexpr TileConfig kTileConfigs[] = {
    {"q192-k96", 192, 96},  // built in for masked problems and those with few work items
    {"q384-k96", 384, 96},  // built in for the others
    {"q96-k96", 96, 96},   {"q48-k96", 48, 96}, {"q192-k192", 192, 192},
};

// Queries are computed in groups of 16 (one AVX-512 vector, two AVX2 ones): a tile's valid
// queries are rounded up to it, and head dims of V to a multiple of it.
inline constexpr int kQueryGranule = 16;

constexpr std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Per-thread tiles, carved from one tracked buffer; each piece starts 64-byte aligned.
// 650 KiB at head dim 256 with the default tiles (q192-k96), so a thread's working set stays in
// Zen 4's 1 MiB L2.
struct Workspace {
  HostBuffer buffer;
  float* qt = nullptr;                // head_dim × query tile: Qᵀ·scale·log2(e), zero past the valid queries
  float* keys = nullptr;              // key tile × head_dim
  float* values = nullptr;            // key tile × dim_v_padded, zero past dim_v
  float* scores = nullptr;            // key tile × query tile: Sᵀ, then Pᵀ
  float* out = nullptr;               // query tile × dim_v_padded: the unnormalized O
  float* row_max = nullptr;           // query tile, log2 domain
  float* row_sum = nullptr;           // query tile
  float* rescale = nullptr;           // query tile: exp2(old max - new max) for the current key tile
  float* row = nullptr;               // one Q or O row converted to or from fp32
  std::int32_t* key_begin = nullptr;  // query tile: each query's visible keys [begin, end)
  std::int32_t* key_end = nullptr;

  Workspace(std::int64_t head_dim, std::int64_t dim_v_padded, std::int64_t query_tile, std::int64_t key_tile) {
    std::int64_t total = 0;
    carve(head_dim, dim_v_padded, query_tile, key_tile, [&](std::int64_t floats) {
      total += round_up(floats, 16);
      return static_cast<float*>(nullptr);
    });
    buffer = HostBuffer(static_cast<std::size_t>(total) * sizeof(float));
    std::memset(buffer.data(), 0, buffer.bytes());
    float* next = buffer.as<float>();
    carve(head_dim, dim_v_padded, query_tile, key_tile, [&](std::int64_t floats) {
      float* piece = next;
      next += round_up(floats, 16);
      return piece;
    });
  }

 private:
  template <class Take>
  void carve(std::int64_t head_dim, std::int64_t dim_v_padded, std::int64_t Br, std::int64_t Bc, Take&& take) {
    qt = take(head_dim * Br);
    keys = take(Bc * head_dim);
    values = take(Bc * dim_v_padded);
    scores = take(Bc * Br);
    out = take(Br * dim_v_padded);
    row_max = take(Br);
    row_sum = take(Br);
    rescale = take(Br);
    row = take(std::max(round_up(head_dim, 16), dim_v_padded));
    key_begin = reinterpret_cast<std::int32_t*>(take(Br));
    key_end = reinterpret_cast<std::int32_t*>(take(Br));
  }
};

// The forward of `problem` with `tiles` on every thread (args checked by the caller), with
// AVX2 + FMA or with AVX-512 kernels; the latter only on a CPU where
// cpu_supports(CpuIsa::Avx512).
void forward_avx2(const AttentionProblem& problem, const AttentionArgs& args, const TileConfig& tiles);
void forward_avx512(const AttentionProblem& problem, const AttentionArgs& args, const TileConfig& tiles);

}  // namespace attnsuite::cpu::flash
