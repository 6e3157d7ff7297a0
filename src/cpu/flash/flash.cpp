// `cpu-flash`: FlashAttention-2's forward on the CPU. A work item is one (batch, q head, query
// tile); it walks the key tiles of its kv head with an online softmax (running max and sum,
// the accumulator rescaled when the max grows, one division at the end), so the extra memory is
// a few tiles per thread, allocated through HostBuffer so the tracker sees them.
//
// The tile is computed transposed, Sᵀ = K·Qᵀ (keys × queries), which makes every step a
// broadcast-FMA over contiguous rows without transposing K or V per tile:
//   scores:  Sᵀ[j][i:i+16] += K[j][d] · Qᵀ[d][i:i+16]      (Qᵀ packed once per work item)
//   softmax: the per-query max and sum are vertical vector max/add over the rows j of Sᵀ
//   P·V:     O[i][c:c+16]  += Pᵀ[j][i] · V[j][c:c+16]       (V rows as they are)
// Q is pre-multiplied by scale·log2(e) so the exponentials are exp2 with no extra multiply.
// History and measurements: docs/kernels/cpu-flash.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/error.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "attnsuite/memory.hpp"
#include "cpu/common.hpp"
#include "cpu/simd_math.hpp"

namespace attnsuite::cpu {
namespace {

// Tile sizes and register blocks. Both micro-kernels hold 6×16 accumulators (12 of the 16 ymm
// registers), enough independent FMA chains for Zen 4's 2 pipes × 4 cycles latency.
struct FlashTraits {
  static constexpr int kScoreKeys = 6;      // register block of the scores kernel: keys
  static constexpr int kScoreQueries = 16;  // ... and queries
  static constexpr int kOutQueries = 6;     // register block of the P·V kernel: queries
  static constexpr int kOutDims = 16;       // ... and output dims
};

// Tile sizes, chosen at run time (`attnsuite tune --kernels` times them; the kernel-config
// cache picks one per CPU and shape class). Each pass over a head's K/V serves `query_tile`
// queries: 192 against 96 halves that traffic (113 vs 127 ms on B=1 H=16 N=2048 D=64); 288,
// and key tiles of 48 or 192, were slower there. Smaller query tiles make more work items,
// which can pay where a problem has fewer items than threads. The thread's tiles stay in
// Zen 4's 1 MiB L2 up to head dim 256.
struct TileConfig {
  const char* name;
  int query_tile;  // queries per work item (Br): a multiple of 16
  int key_tile;    // keys per tile (Bc): a multiple of 6
};
constexpr TileConfig kTileConfigs[] = {
    {"q192-k96", 192, 96},  // the default (first)
    {"q96-k96", 96, 96},
    {"q48-k96", 48, 96},
    {"q192-k192", 192, 192},
};
static_assert(kTileConfigs[0].query_tile % FlashTraits::kScoreQueries == 0);
constexpr bool valid_tiles() {
  for (const TileConfig& config : kTileConfigs)
    if (config.query_tile % FlashTraits::kScoreQueries != 0 || config.key_tile % FlashTraits::kScoreKeys != 0)
      return false;
  return true;
}
static_assert(valid_tiles(), "query tiles are multiples of 16, key tiles of 6");

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// st[r][0:16] = Σ_d keys[r][d] · qt[d][0:16] for r < 6. qt and st 32-byte aligned rows.
inline void score_block(const float* keys, std::int64_t key_stride, const float* qt,
                        std::int64_t qt_stride, int depth, float* st, std::int64_t st_stride) {
  constexpr int R = FlashTraits::kScoreKeys;
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int d = 0; d < depth; ++d) {
    const __m256 q0 = _mm256_load_ps(qt + d * qt_stride);
    const __m256 q1 = _mm256_load_ps(qt + d * qt_stride + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 k = _mm256_broadcast_ss(keys + r * key_stride + d);
      acc[r][0] = _mm256_fmadd_ps(k, q0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(k, q1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(st + r * st_stride, acc[r][0]);
    _mm256_store_ps(st + r * st_stride + 8, acc[r][1]);
  }
}

// out[r][0:16] = alpha[r] · out[r][0:16] + Σ_{j<keys} pt[j][r] · values[j][0:16] for r < R
// (R = 6, or 2 and 4 for the tail of a 16-query multiple).
template <int R>
inline void pv_block(const float* pt, std::int64_t pt_stride, const float* values,
                     std::int64_t value_stride, int keys, float* out, std::int64_t out_stride,
                     const float* alpha) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) {
    const __m256 rescale = _mm256_broadcast_ss(alpha + r);
    acc[r][0] = _mm256_mul_ps(_mm256_load_ps(out + r * out_stride), rescale);
    acc[r][1] = _mm256_mul_ps(_mm256_load_ps(out + r * out_stride + 8), rescale);
  }
  for (int j = 0; j < keys; ++j) {
    const __m256 v0 = _mm256_load_ps(values + j * value_stride);
    const __m256 v1 = _mm256_load_ps(values + j * value_stride + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 p = _mm256_broadcast_ss(pt + j * pt_stride + r);
      acc[r][0] = _mm256_fmadd_ps(p, v0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(p, v1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(out + r * out_stride, acc[r][0]);
    _mm256_store_ps(out + r * out_stride + 8, acc[r][1]);
  }
}

// Per-thread tiles, carved from one tracked buffer; each piece starts 64-byte aligned.
// 650 KiB at head dim 256 with the default tiles (q192-k96), so a thread's working set stays in Zen 4's 1 MiB L2.
struct Workspace {
  HostBuffer buffer;
  float* qt = nullptr;  // head_dim × query tile: Qᵀ·scale·log2(e), zero past the valid queries
  float* keys = nullptr;     // key tile × head_dim
  float* values = nullptr;   // key tile × dim_v_padded, zero past dim_v
  float* scores = nullptr;   // key tile × query tile: Sᵀ, then Pᵀ
  float* out = nullptr;      // query tile × dim_v_padded: the unnormalized O
  float* row_max = nullptr;  // query tile, log2 domain
  float* row_sum = nullptr;  // query tile
  float* rescale = nullptr;  // query tile: exp2(old max - new max) for the current key tile
  float* row = nullptr;      // one Q or O row converted to or from fp32
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

class FlashKernel {
 public:
  FlashKernel(const AttentionProblem& problem, const AttentionArgs& args, const TileConfig& tiles)
      : problem_(problem),
        args_(args),
        head_dim_(problem.head_dim),
        dim_v_(problem.dim_v()),
        dim_v_padded_(round_up(problem.dim_v(), FlashTraits::kOutDims)),
        Br_(tiles.query_tile),
        Bc_(tiles.key_tile),
        query_tiles_((problem.seq_q + Br_ - 1) / Br_),
        element_bytes_(static_cast<std::int64_t>(size_of(problem.dtype))),
        q_scale_(problem.softmax_scale() * kLog2e) {}

  std::int64_t work_items() const {
    return static_cast<std::int64_t>(problem_.batch) * problem_.heads_q * query_tiles_;
  }
  Workspace make_workspace() const { return Workspace(head_dim_, dim_v_padded_, Br_, Bc_); }

  // Items go head by head, so the threads work through one head's K/V together and find it in
  // L2/L3 (113 vs 122 ms on the B=1 H=16 N=2048 D=64 target against spreading concurrent items
  // over heads); within a head, last query tile first: under a causal mask those are the longest.
  void run_item(std::int64_t item, Workspace& ws) const {
    const std::int64_t query_tile = query_tiles_ - 1 - item % query_tiles_;
    const std::int64_t head_item = item / query_tiles_;
    run_tile(static_cast<int>(head_item / problem_.heads_q),
             static_cast<int>(head_item % problem_.heads_q), query_tile * Br_,
             ws);
  }

 private:
  const char* element(const TensorView& view, std::int64_t b, std::int64_t s,
                      std::int64_t h) const {
    return static_cast<const char*>(view.data) + view.offset(b, s, h, 0) * element_bytes_;
  }

  // Loads `count` elements of a row as fp32 into dst.
  void load_row(const char* src, float* dst, std::int64_t count) const {
    convert_to_float(src, problem_.dtype, dst, static_cast<std::size_t>(count));
  }

  void run_tile(int b, int h, std::int64_t q0, Workspace& ws) const {
    const std::int64_t Br = Br_, Bc = Bc_;
    const int kv_head = problem_.kv_head_of(h);
    const std::int64_t rows = std::min<std::int64_t>(Br, problem_.seq_q - q0);
    // Query columns actually computed: the valid ones rounded up to the scores kernel's block.
    const std::int64_t active =
        std::min<std::int64_t>(Br, round_up(rows, FlashTraits::kScoreQueries));

    // Qᵀ, pre-scaled into the log2 domain; columns past the valid queries are zero.
    if (rows < Br) {
      for (std::int64_t d = 0; d < head_dim_; ++d)
        std::fill(ws.qt + d * Br + rows, ws.qt + d * Br + Br, 0.0f);
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      load_row(element(args_.q, b, q0 + i, h), ws.row, head_dim_);
      for (std::int64_t d = 0; d < head_dim_; ++d) ws.qt[d * Br + i] = ws.row[d] * q_scale_;
    }
    for (std::int64_t i = 0; i < active; ++i) {
      const bool valid = i < rows;
      ws.key_begin[i] = valid ? static_cast<std::int32_t>(problem_.key_begin(q0 + i)) : 0;
      ws.key_end[i] = valid ? static_cast<std::int32_t>(
                                  std::max(problem_.key_begin(q0 + i), problem_.key_end(q0 + i)))
                            : 0;
      ws.row_max[i] = -std::numeric_limits<float>::infinity();
      ws.row_sum[i] = 0.0f;
    }
    std::fill(ws.out, ws.out + active * dim_v_padded_, 0.0f);

    // Keys any valid query sees: begin and end are nondecreasing in the query index.
    const std::int64_t first_key = problem_.key_begin(q0);
    const std::int64_t last_key = problem_.key_end(q0 + rows - 1);
    const std::int64_t latest_begin = problem_.key_begin(q0 + rows - 1);
    const std::int64_t earliest_end = problem_.key_end(q0);
    for (std::int64_t k0 = first_key / Bc * Bc; k0 < last_key; k0 += Bc) {
      const std::int64_t cols = std::min<std::int64_t>(Bc, problem_.seq_kv - k0);
      const bool needs_mask = latest_begin > k0 || earliest_end < k0 + cols;
      update_with_key_tile(b, kv_head, k0, cols, active, needs_mask, ws);
    }
    write_output(b, h, q0, rows, ws);
  }

  void update_with_key_tile(int b, int kv_head, std::int64_t k0, std::int64_t cols,
                            std::int64_t active, bool needs_mask, Workspace& ws) const {
    const std::int64_t Br = Br_;
    for (std::int64_t j = 0; j < cols; ++j) {
      load_row(element(args_.k, b, k0 + j, kv_head), ws.keys + j * head_dim_, head_dim_);
      load_row(element(args_.v, b, k0 + j, kv_head), ws.values + j * dim_v_padded_, dim_v_);
    }

    // Sᵀ = K·Qᵀ. Key rows past `cols` hold stale but finite data; their scores are never read.
    const std::int64_t key_rows = round_up(cols, FlashTraits::kScoreKeys);
    for (std::int64_t j = 0; j < key_rows; j += FlashTraits::kScoreKeys) {
      for (std::int64_t i = 0; i < active; i += FlashTraits::kScoreQueries) {
        score_block(ws.keys + j * head_dim_, head_dim_, ws.qt + i, Br, static_cast<int>(head_dim_),
                    ws.scores + j * Br + i, Br);
      }
    }
    if (needs_mask) apply_mask(k0, cols, active, Br, ws);
    online_softmax(cols, active, Br, ws);

    constexpr int R = FlashTraits::kOutQueries;
    for (std::int64_t c = 0; c < dim_v_padded_; c += FlashTraits::kOutDims) {
      const float* values = ws.values + c;
      std::int64_t i = 0;
      for (; i + R <= active; i += R) {
        pv_block<R>(ws.scores + i, Br, values, dim_v_padded_, static_cast<int>(cols),
                    ws.out + i * dim_v_padded_ + c, dim_v_padded_, ws.rescale + i);
      }
      // active is a multiple of 16, so the tail is 0, 2 or 4 queries.
      static_assert(FlashTraits::kScoreQueries == 16 && R == 6);
      if (active - i == 2) {
        pv_block<2>(ws.scores + i, Br, values, dim_v_padded_, static_cast<int>(cols),
                    ws.out + i * dim_v_padded_ + c, dim_v_padded_, ws.rescale + i);
      } else if (active - i == 4) {
        pv_block<4>(ws.scores + i, Br, values, dim_v_padded_, static_cast<int>(cols),
                    ws.out + i * dim_v_padded_ + c, dim_v_padded_, ws.rescale + i);
      }
    }
  }

  // Sᵀ[j][i] = -inf where key k0 + j is outside query i's [begin, end).
  static void apply_mask(std::int64_t k0, std::int64_t cols, std::int64_t active, std::int64_t Br, Workspace& ws) {
    const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (std::int64_t j = 0; j < cols; ++j) {
      const __m256i key = _mm256_set1_epi32(static_cast<int>(k0 + j));
      float* row = ws.scores + j * Br;
      for (std::int64_t i = 0; i < active; i += 8) {
        const __m256i begin = _mm256_load_si256(reinterpret_cast<const __m256i*>(ws.key_begin + i));
        const __m256i end = _mm256_load_si256(reinterpret_cast<const __m256i*>(ws.key_end + i));
        // hidden = key < begin || key >= end  ==  begin > key || !(end > key)
        const __m256i before = _mm256_cmpgt_epi32(begin, key);
        const __m256i inside_end = _mm256_cmpgt_epi32(end, key);
        const __m256i hidden =
            _mm256_or_si256(before, _mm256_xor_si256(inside_end, _mm256_set1_epi32(-1)));
        _mm256_store_ps(row + i, _mm256_blendv_ps(_mm256_load_ps(row + i), minus_inf,
                                                  _mm256_castsi256_ps(hidden)));
      }
    }
  }

  // For 16 queries at a time: new max over the tile's rows, rescale factor for the running
  // sum and output, Pᵀ = exp2(Sᵀ - max) in place, running sum. A query that has seen no key
  // yet keeps max = -inf; its exponent is taken against 0 so -inf - -inf never makes a NaN.
  static void online_softmax(std::int64_t cols, std::int64_t active, std::int64_t Br, Workspace& ws) {
    const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    for (std::int64_t i = 0; i < active; i += 16) {
      const __m256 old_max0 = _mm256_load_ps(ws.row_max + i);
      const __m256 old_max1 = _mm256_load_ps(ws.row_max + i + 8);
      __m256 max0 = old_max0, max1 = old_max1;
      for (std::int64_t j = 0; j < cols; ++j) {
        max0 = _mm256_max_ps(max0, _mm256_load_ps(ws.scores + j * Br + i));
        max1 = _mm256_max_ps(max1, _mm256_load_ps(ws.scores + j * Br + i + 8));
      }
      const __m256 base0 = _mm256_andnot_ps(_mm256_cmp_ps(max0, minus_inf, _CMP_EQ_OQ), max0);
      const __m256 base1 = _mm256_andnot_ps(_mm256_cmp_ps(max1, minus_inf, _CMP_EQ_OQ), max1);
      __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
      for (std::int64_t j = 0; j < cols; ++j) {
        float* row = ws.scores + j * Br + i;
        const __m256 p0 = simd::exp2_ps(_mm256_sub_ps(_mm256_load_ps(row), base0));
        const __m256 p1 = simd::exp2_ps(_mm256_sub_ps(_mm256_load_ps(row + 8), base1));
        _mm256_store_ps(row, p0);
        _mm256_store_ps(row + 8, p1);
        sum0 = _mm256_add_ps(sum0, p0);
        sum1 = _mm256_add_ps(sum1, p1);
      }
      const __m256 rescale0 = simd::exp2_ps(_mm256_sub_ps(old_max0, base0));
      const __m256 rescale1 = simd::exp2_ps(_mm256_sub_ps(old_max1, base1));
      _mm256_store_ps(ws.rescale + i, rescale0);
      _mm256_store_ps(ws.rescale + i + 8, rescale1);
      _mm256_store_ps(ws.row_sum + i,
                      _mm256_fmadd_ps(_mm256_load_ps(ws.row_sum + i), rescale0, sum0));
      _mm256_store_ps(ws.row_sum + i + 8,
                      _mm256_fmadd_ps(_mm256_load_ps(ws.row_sum + i + 8), rescale1, sum1));
      _mm256_store_ps(ws.row_max + i, max0);
      _mm256_store_ps(ws.row_max + i + 8, max1);
    }
  }

  void write_output(int b, int h, std::int64_t q0, std::int64_t rows, Workspace& ws) const {
    char* o_base = static_cast<char*>(args_.o.data);
    float* lse = args_.lse.empty()
                     ? nullptr
                     : args_.lse.data +
                           (static_cast<std::int64_t>(b) * problem_.heads_q + h) * problem_.seq_q +
                           q0;
    for (std::int64_t i = 0; i < rows; ++i) {
      const float sum = ws.row_sum[i];
      float* acc = ws.out + i * dim_v_padded_;
      // A row that saw no key is O = 0 exactly, even where V held a NaN or Inf at a key masked
      // for it (0·NaN in the tile's P·V is NaN). A NaN sum stays NaN.
      if (sum == 0.0f) std::fill(acc, acc + dim_v_padded_, 0.0f);
      const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
      char* dst = o_base + args_.o.offset(b, q0 + i, h, 0) * element_bytes_;
      const __m256 scale = _mm256_set1_ps(inverse);
      if (problem_.dtype == DType::F32) {
        auto* out = reinterpret_cast<float*>(dst);
        std::int64_t d = 0;
        for (; d + 8 <= dim_v_; d += 8)
          _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_load_ps(acc + d), scale));
        for (; d < dim_v_; ++d) out[d] = acc[d] * inverse;
      } else {
        for (std::int64_t d = 0; d < dim_v_padded_; d += 8)
          _mm256_store_ps(ws.row + d, _mm256_mul_ps(_mm256_load_ps(acc + d), scale));
        convert_from_float(ws.row, dst, problem_.dtype, static_cast<std::size_t>(dim_v_));
      }
      if (lse != nullptr) {
        // No key: -inf. A NaN sum (a NaN input) stays NaN rather than reading as "no key".
        lse[i] = sum == 0.0f ? -std::numeric_limits<float>::infinity() : ws.row_max[i] * kLn2 + std::log(sum);
      }
    }
  }

  const AttentionProblem& problem_;
  const AttentionArgs& args_;
  std::int64_t head_dim_;
  std::int64_t dim_v_;
  std::int64_t dim_v_padded_;
  std::int64_t Br_, Bc_;
  std::int64_t query_tiles_;
  std::int64_t element_bytes_;
  float q_scale_;
};

class FlashBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu-flash"; }
  std::string_view display_name() const override {
    return "FlashAttention-style tiled CPU kernel (attnsuite)";
  }
  Device device() const override { return {DeviceType::Cpu, 0}; }
  std::string capabilities() const override {
    return "fp32/fp16/bf16, tiled online softmax, O(N) memory, AVX2+FMA, threaded, causal, "
           "window, GQA/MQA, head dim 32..256";
  }
  Support supports(const AttentionProblem& problem) const override {
    return supports_common(problem);
  }

  std::vector<std::string> kernel_configs(const AttentionProblem&) const override {
    std::vector<std::string> names;
    for (const TileConfig& config : kTileConfigs) names.emplace_back(config.name);
    return names;
  }
  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    require_support(*this, problem);
    const TileConfig& tiles = find_config(choose_kernel_config(*this, problem, options));
    return std::make_unique<FunctionPlan>(
        tiles.name, 0, [this, problem, &tiles](const AttentionArgs& args, Stream, RunReport&) { run(problem, args, tiles); });
  }

 private:
  void run(const AttentionProblem& problem, const AttentionArgs& args, const TileConfig& tiles) const {
    check_args(name(), problem, args, /*contiguous_last_dim=*/true);
    const FlashKernel kernel(problem, args, tiles);
    const int threads =
        static_cast<int>(std::min<std::int64_t>(cpu_threads(), kernel.work_items()));
    std::vector<Workspace> workspaces;
    workspaces.reserve(threads);
    for (int t = 0; t < threads; ++t) workspaces.push_back(kernel.make_workspace());
    parallel_for(kernel.work_items(), threads, [&](std::int64_t item, int thread_index) {
      kernel.run_item(item, workspaces[thread_index]);
    });
  }

  static const TileConfig& find_config(std::string_view name) {
    for (const TileConfig& config : kTileConfigs)
      if (name == config.name) return config;
    throw Error(ErrorKind::Internal, fmt::format("cpu-flash: kernel config '{}' not in its table", name));
  }
};

}  // namespace

std::unique_ptr<Backend> make_flash_backend() { return std::make_unique<FlashBackend>(); }

}  // namespace attnsuite::cpu
