// cpu-flash's forward kernel, written once over a vector policy V (simd::Avx2, simd::Avx512) and
// instantiated per ISA by forward_avx2.cpp and forward_avx512.cpp (the latter inside an AVX-512
// region: every header this one needs is included by forward.hpp, before the region opens).
//
// A work item is one (batch, q head, query tile); it walks the key tiles of its kv head with an
// online softmax (running max and sum, the accumulator rescaled when the max grows, one
// division at the end), so the extra memory is a few tiles per thread.
//
// The tile is computed transposed, Sᵀ = K·Qᵀ (keys × queries), which makes every step a
// broadcast-FMA over contiguous rows without transposing K or V per tile:
//   scores:  Sᵀ[j][i:i+w] += K[j][d] · Qᵀ[d][i:i+w]      (Qᵀ packed once per work item)
//   softmax: the per-query max and sum are vertical vector max/add over the rows j of Sᵀ
//   P·V:     O[i][c:c+w]  += Pᵀ[j][i] · V[j][c:c+w]       (V rows as they are)
// Q is pre-multiplied by scale·log2(e) so the exponentials are exp2 with no extra multiply.
// Every output element is summed in the same order whatever the ISA, and exp2 is the same
// polynomial, so AVX2 and AVX-512 give the same bits. History: docs/kernels/cpu-flash.md.
#pragma once

#include "cpu/flash/forward.hpp"
#include "cpu/simd_math.hpp"

namespace attnsuite::cpu::flash {

// Register blocks: rows × vectors of accumulators in the two micro-kernels.
template <class V>
struct FlashBlocks;

// 6×2 ymm = 12 of the 16 registers, enough independent FMA chains for 2 pipes × 4 cycles.
template <>
struct FlashBlocks<simd::Avx2> {
  static constexpr int kScoreKeys = 6;     // scores kernel: key rows ...
  static constexpr int kScoreVectors = 2;  // ... × query vectors (16 queries)
  static constexpr int kOutQueries = 6;    // P·V kernel: query rows ...
  static constexpr int kOutVectors = 2;    // ... × output-dim vectors (16 dims)
};

// 32 zmm registers: 12×2 and 8×2 accumulators. Per depth step the scores kernel loads 2
// vectors and 12 scalars for 24 FMAs, so a core with two 512-bit FMA pipes (Xeon) stays
// FMA-bound on its two loads per cycle; on Zen 4 (one 512-bit FMA per cycle) anything ≥ 8
// chains is.
template <>
struct FlashBlocks<simd::Avx512> {
  static constexpr int kScoreKeys = 12;
  static constexpr int kScoreVectors = 2;  // 32 queries; a 16-query tail takes one vector
  static constexpr int kOutQueries = 8;
  static constexpr int kOutVectors = 2;  // 32 dims; a 16-dim tail takes one vector
};

constexpr bool tiles_fit(int key_block, int query_granule) {
  for (const TileConfig& config : kTileConfigs)
    if (config.query_tile % query_granule != 0 || config.key_tile % key_block != 0) return false;
  return true;
}
static_assert(tiles_fit(FlashBlocks<simd::Avx2>::kScoreKeys, kQueryGranule) &&
                  tiles_fit(FlashBlocks<simd::Avx512>::kScoreKeys, kQueryGranule),
              "query tiles are multiples of 16, key tiles of every ISA's score block");

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// How a micro-kernel reads the operand it broadcasts: by rows as they are (A[r][s] =
// a[r·lda + s]: K in the scores kernel), or transposed (A[r][s] = a[s·lda + r]: Pᵀ in P·V).
enum class BroadcastLayout { Rows, Transposed };

// out[r][0:C·w] = acc[r] + Σ_{s<steps} A[r][s] · b[s·b_stride][0:C·w] for r < R: the register
// block both micro-kernels run once they have set acc. b and out rows aligned. Forced inline, so
// that acc stays the caller's array, whose accumulators ATTNSUITE_UNROLL keeps in registers.
template <class V, int R, int C, BroadcastLayout kA>
__attribute__((always_inline)) inline void fma_block(typename V::Vec (&acc)[R][C], const float* a, std::int64_t lda,
                                                     const float* b, std::int64_t b_stride, int steps, float* out,
                                                     std::int64_t out_stride) {
  using Vec = typename V::Vec;
  constexpr int W = V::kLanes;
  for (int s = 0; s < steps; ++s) {
    Vec row[C];
    ATTNSUITE_UNROLL
    for (int c = 0; c < C; ++c) row[c] = V::load(b + s * b_stride + c * W);
    ATTNSUITE_UNROLL
    for (int r = 0; r < R; ++r) {
      const Vec x = V::broadcast(kA == BroadcastLayout::Rows ? a + r * lda + s : a + s * lda + r);
      ATTNSUITE_UNROLL
      for (int c = 0; c < C; ++c) acc[r][c] = V::fmadd(x, row[c], acc[r][c]);
    }
  }
  ATTNSUITE_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTNSUITE_UNROLL
    for (int c = 0; c < C; ++c) V::store(out + r * out_stride + c * W, acc[r][c]);
  }
}

// st[r][0:C·w] = Σ_d keys[r][d] · qt[d][0:C·w] for r < R. qt and st rows aligned.
template <class V, int R, int C>
inline void score_block(const float* keys, std::int64_t key_stride, const float* qt, std::int64_t qt_stride, int depth,
                        float* st, std::int64_t st_stride) {
  typename V::Vec acc[R][C];
  ATTNSUITE_UNROLL
  for (int r = 0; r < R; ++r) {
    ATTNSUITE_UNROLL
    for (int c = 0; c < C; ++c) acc[r][c] = V::zero();
  }
  fma_block<V, R, C, BroadcastLayout::Rows>(acc, keys, key_stride, qt, qt_stride, depth, st, st_stride);
}

// out[r][0:C·w] = alpha[r] · out[r][0:C·w] + Σ_{j<keys} pt[j][r] · values[j][0:C·w] for r < R.
template <class V, int R, int C>
inline void pv_block(const float* pt, std::int64_t pt_stride, const float* values, std::int64_t value_stride, int keys,
                     float* out, std::int64_t out_stride, const float* alpha) {
  using Vec = typename V::Vec;
  constexpr int W = V::kLanes;
  Vec acc[R][C];
  ATTNSUITE_UNROLL
  for (int r = 0; r < R; ++r) {
    const Vec rescale = V::broadcast(alpha + r);
    ATTNSUITE_UNROLL
    for (int c = 0; c < C; ++c) acc[r][c] = V::mul(V::load(out + r * out_stride + c * W), rescale);
  }
  fma_block<V, R, C, BroadcastLayout::Transposed>(acc, pt, pt_stride, values, value_stride, keys, out, out_stride);
}

// pv_block for the last `rows` (< R) queries of a tile: one instance per possible count.
template <class V, int R, int C>
inline void pv_block_tail(int rows, const float* pt, std::int64_t pt_stride, const float* values,
                          std::int64_t value_stride, int keys, float* out, std::int64_t out_stride,
                          const float* alpha) {
  if constexpr (R > 1) {
    if (rows == R - 1) {
      pv_block<V, R - 1, C>(pt, pt_stride, values, value_stride, keys, out, out_stride, alpha);
    } else {
      pv_block_tail<V, R - 1, C>(rows, pt, pt_stride, values, value_stride, keys, out, out_stride, alpha);
    }
  }
}

template <class V>
class FlashKernel {
  using Vec = typename V::Vec;
  using Blocks = FlashBlocks<V>;
  static constexpr int W = V::kLanes;
  static_assert(kQueryGranule % W == 0, "a query group is whole vectors");
  static_assert(Blocks::kScoreVectors <= 2 && Blocks::kOutVectors <= 2, "tails of one vector at most");

 public:
  FlashKernel(const AttentionProblem& problem, const AttentionArgs& args, const TileConfig& tiles)
      : problem_(problem),
        args_(args),
        head_dim_(problem.head_dim),
        dim_v_(problem.dim_v()),
        dim_v_padded_(round_up(problem.dim_v(), kQueryGranule)),
        Br_(tiles.query_tile),
        Bc_(tiles.key_tile),
        query_tiles_((problem.seq_q + Br_ - 1) / Br_),
        element_bytes_(static_cast<std::int64_t>(size_of(problem.dtype))),
        out_element_bytes_(static_cast<std::int64_t>(size_of(problem.output_dtype()))),
        // e4m3: Q and K are read as their e4m3 values, their descales folded into the score
        // scale (and V's into the output), as FP8 kernels do.
        q_scale_(problem.softmax_scale() * kLog2e *
                 (problem.dtype == DType::E4M3 ? args.q.descale * args.k.descale : 1.0f)),
        v_descale_(problem.dtype == DType::E4M3 ? args.v.descale : 1.0f) {}

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
    run_tile(static_cast<int>(head_item / problem_.heads_q), static_cast<int>(head_item % problem_.heads_q),
             query_tile * Br_, ws);
  }

 private:
  const char* element(const TensorView& view, std::int64_t b, std::int64_t s, std::int64_t h) const {
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
    // Query columns actually computed: the valid ones rounded up to the query granule.
    const std::int64_t active = std::min<std::int64_t>(Br, round_up(rows, kQueryGranule));

    // Qᵀ, pre-scaled into the log2 domain; columns past the valid queries are zero.
    if (rows < Br) {
      for (std::int64_t d = 0; d < head_dim_; ++d) std::fill(ws.qt + d * Br + rows, ws.qt + d * Br + Br, 0.0f);
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      load_row(element(args_.q, b, q0 + i, h), ws.row, head_dim_);
      for (std::int64_t d = 0; d < head_dim_; ++d) ws.qt[d * Br + i] = ws.row[d] * q_scale_;
    }
    for (std::int64_t i = 0; i < active; ++i) {
      const bool valid = i < rows;
      ws.key_begin[i] = valid ? static_cast<std::int32_t>(problem_.key_begin(q0 + i)) : 0;
      ws.key_end[i] =
          valid ? static_cast<std::int32_t>(std::max(problem_.key_begin(q0 + i), problem_.key_end(q0 + i))) : 0;
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

  void update_with_key_tile(int b, int kv_head, std::int64_t k0, std::int64_t cols, std::int64_t active,
                            bool needs_mask, Workspace& ws) const {
    const std::int64_t Br = Br_;
    for (std::int64_t j = 0; j < cols; ++j) {
      load_row(element(args_.k, b, k0 + j, kv_head), ws.keys + j * head_dim_, head_dim_);
      load_row(element(args_.v, b, k0 + j, kv_head), ws.values + j * dim_v_padded_, dim_v_);
    }

    // Sᵀ = K·Qᵀ. Key rows past `cols` hold stale but finite data; their scores are never read.
    constexpr int SK = Blocks::kScoreKeys, SV = Blocks::kScoreVectors;
    const int depth = static_cast<int>(head_dim_);
    const std::int64_t key_rows = round_up(cols, SK);
    for (std::int64_t j = 0; j < key_rows; j += SK) {
      const float* keys = ws.keys + j * head_dim_;
      float* st = ws.scores + j * Br;
      std::int64_t i = 0;
      for (; i + SV * W <= active; i += SV * W)
        score_block<V, SK, SV>(keys, head_dim_, ws.qt + i, Br, depth, st + i, Br);
      if constexpr (SV == 2) {
        if (i < active) score_block<V, SK, 1>(keys, head_dim_, ws.qt + i, Br, depth, st + i, Br);
      }
    }
    if (needs_mask) apply_mask(k0, cols, active, Br, ws);
    online_softmax(cols, active, Br, ws);

    constexpr int OV = Blocks::kOutVectors;
    const int keys = static_cast<int>(cols);
    std::int64_t c = 0;
    for (; c + OV * W <= dim_v_padded_; c += OV * W) pv_columns<OV>(c, keys, active, Br, ws);
    if constexpr (OV == 2) {
      if (c < dim_v_padded_) pv_columns<1>(c, keys, active, Br, ws);
    }
  }

  // O[0:active][c:c+C·w] with the tile's Pᵀ and V, R queries at a time.
  template <int C>
  void pv_columns(std::int64_t c, int keys, std::int64_t active, std::int64_t Br, Workspace& ws) const {
    constexpr int R = Blocks::kOutQueries;
    const float* values = ws.values + c;
    std::int64_t i = 0;
    for (; i + R <= active; i += R)
      pv_block<V, R, C>(ws.scores + i, Br, values, dim_v_padded_, keys, ws.out + i * dim_v_padded_ + c, dim_v_padded_,
                        ws.rescale + i);
    if (i < active)
      pv_block_tail<V, R, C>(static_cast<int>(active - i), ws.scores + i, Br, values, dim_v_padded_, keys,
                             ws.out + i * dim_v_padded_ + c, dim_v_padded_, ws.rescale + i);
  }

  // Sᵀ[j][i] = -inf where key k0 + j is outside query i's [begin, end).
  static void apply_mask(std::int64_t k0, std::int64_t cols, std::int64_t active, std::int64_t Br, Workspace& ws) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const auto key = static_cast<std::int32_t>(k0 + j);
      float* row = ws.scores + j * Br;
      for (std::int64_t i = 0; i < active; i += W)
        V::store(row + i, V::hide_outside(V::load(row + i), ws.key_begin + i, ws.key_end + i, key));
    }
  }

  // For 16 queries at a time: new max over the tile's rows, rescale factor for the running
  // sum and output, Pᵀ = exp2(Sᵀ - max) in place, running sum. A query that has seen no key
  // yet keeps max = -inf; its exponent is taken against 0 so -inf - -inf never makes a NaN.
  static void online_softmax(std::int64_t cols, std::int64_t active, std::int64_t Br, Workspace& ws) {
    constexpr int G = kQueryGranule / W;  // vectors per group: independent chains for max and sum
    for (std::int64_t i = 0; i < active; i += kQueryGranule) {
      Vec old_max[G], max[G], base[G], sum[G];
      for (int g = 0; g < G; ++g) max[g] = old_max[g] = V::load(ws.row_max + i + g * W);
      for (std::int64_t j = 0; j < cols; ++j)
        for (int g = 0; g < G; ++g) max[g] = V::max(max[g], V::load(ws.scores + j * Br + i + g * W));
      for (int g = 0; g < G; ++g) {
        base[g] = V::zero_where_minus_inf(max[g]);
        sum[g] = V::zero();
      }
      for (std::int64_t j = 0; j < cols; ++j) {
        float* row = ws.scores + j * Br + i;
        for (int g = 0; g < G; ++g) {
          const Vec p = V::exp2(V::sub(V::load(row + g * W), base[g]));
          V::store(row + g * W, p);
          sum[g] = V::add(sum[g], p);
        }
      }
      for (int g = 0; g < G; ++g) {
        const std::int64_t at = i + g * W;
        const Vec rescale = V::exp2(V::sub(old_max[g], base[g]));
        V::store(ws.rescale + at, rescale);
        V::store(ws.row_sum + at, V::fmadd(V::load(ws.row_sum + at), rescale, sum[g]));
        V::store(ws.row_max + at, max[g]);
      }
    }
  }

  void write_output(int b, int h, std::int64_t q0, std::int64_t rows, Workspace& ws) const {
    char* o_base = static_cast<char*>(args_.o.data);
    float* lse = args_.lse.empty()
                     ? nullptr
                     : args_.lse.data + (static_cast<std::int64_t>(b) * problem_.heads_q + h) * problem_.seq_q + q0;
    for (std::int64_t i = 0; i < rows; ++i) {
      const float sum = ws.row_sum[i];
      float* acc = ws.out + i * dim_v_padded_;
      // A row that saw no key is O = 0 exactly, even where V held a NaN or Inf at a key masked
      // for it (0·NaN in the tile's P·V is NaN). A NaN sum stays NaN.
      if (sum == 0.0f) std::fill(acc, acc + dim_v_padded_, 0.0f);
      const float inverse = sum == 0.0f ? 0.0f : v_descale_ / sum;
      char* dst = o_base + args_.o.offset(b, q0 + i, h, 0) * out_element_bytes_;
      const Vec scale = V::set1(inverse);
      if (problem_.output_dtype() == DType::F32) {
        auto* out = reinterpret_cast<float*>(dst);
        std::int64_t d = 0;
        for (; d + W <= dim_v_; d += W) V::storeu(out + d, V::mul(V::load(acc + d), scale));
        for (; d < dim_v_; ++d) out[d] = acc[d] * inverse;
      } else {
        for (std::int64_t d = 0; d < dim_v_padded_; d += W) V::store(ws.row + d, V::mul(V::load(acc + d), scale));
        convert_from_float(ws.row, dst, problem_.output_dtype(), static_cast<std::size_t>(dim_v_));
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
  std::int64_t element_bytes_;      // of Q, K, V
  std::int64_t out_element_bytes_;  // of O
  float q_scale_;
  float v_descale_;
};

// The whole forward: one workspace per thread, items shared out by parallel_for.
template <class V>
void run_forward(const AttentionProblem& problem, const AttentionArgs& args, const TileConfig& tiles) {
  const FlashKernel<V> kernel(problem, args, tiles);
  const int threads = static_cast<int>(std::min<std::int64_t>(cpu_threads(), kernel.work_items()));
  std::vector<Workspace> workspaces;
  workspaces.reserve(threads);
  for (int t = 0; t < threads; ++t) workspaces.push_back(kernel.make_workspace());
  parallel_for(kernel.work_items(), threads,
               [&](std::int64_t item, int thread_index) { kernel.run_item(item, workspaces[thread_index]); });
}

}  // namespace attnsuite::cpu::flash
