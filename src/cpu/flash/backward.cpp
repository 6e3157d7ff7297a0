// `cpu-flash` backward: FlashAttention-2's algorithm on the CPU. Nothing seq_q × seq_kv is ever
// stored: per (key tile, query tile) the scores are recomputed and P comes back from the
// forward's LSE,
//   S = Q·Kᵀ,  P = exp2(S·scale·log2 e − LSE·log2 e),  dP = dO·Vᵀ,  dS = P∘(dP − D),
//   dV += Pᵀ·dO,  dK += dSᵀ·Q,  dQ += dS·K          (dK, dQ times scale when written)
// with D = rowsum(dO∘O) computed once per row beforehand.
//
// Work: a unit is one (batch, kv head); it owns dK and dV of its keys, so no two threads ever
// write the same gradient. Within a unit the loop is q head of the group → key tile → query
// tile. The q head's Q and dO are packed once into contiguous fp32 rows (read per key tile from
// BSHD views, rows 4 KiB apart, they cost 22% of the time at H = 16); dQ accumulates over the
// key tiles in an fp32 buffer of the q head and is written when the head is done; dK/dV of a
// key tile accumulate over every query that sees it (with GQA over the whole group, in
// chunk-sized buffers). When there are fewer units than threads, each unit's key range is split
// into chunks of about equal visible (query, key) pairs; the chunks then leave dQ parts that are
// summed in chunk order afterwards (deterministic).
//
// All five products are one register-blocked micro-kernel, C[6×16] (+)= A[6×k]·B[k×16] with A
// broadcast and B read as 16-wide rows (the forward's scores kernel). S and dP come out
// row-major (queries × keys); Pᵀ·dO and dSᵀ·Q read P and dS transposed as A (the broadcast
// walks down a column instead of along a row), dS·K reads dS as it is.
#include "cpu/backward.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attnsuite/error.hpp"
#include "attnsuite/memory.hpp"
#include "cpu/common.hpp"
#include "cpu/simd_math.hpp"

namespace attnsuite::cpu {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kBlockRows = 6;   // register block of the micro-kernel: rows of A and C
constexpr int kBlockCols = 16;  // ... and columns of B and C (two ymm)

constexpr std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Tiles: queries per tile and keys per tile (a multiple of 16, the micro-kernel's width over
// keys).
struct BackwardTiles {
  const char* name;
  int query_tile;
  int key_tile;
};
constexpr BackwardTiles kBackwardTiles[] = {
    {"q96-k96", 96, 96},  // the default (first)
    {"q48-k96", 48, 96}, {"q192-k96", 192, 96}, {"q96-k48", 96, 48}, {"q96-k192", 96, 192},
};
constexpr bool valid_tiles() {
  for (const BackwardTiles& tiles : kBackwardTiles)
    if (tiles.query_tile <= 0 || tiles.key_tile % kBlockCols != 0) return false;
  return true;
}
static_assert(valid_tiles(), "key tiles are multiples of 16");

const BackwardTiles& find_tiles(std::string_view name) {
  if (name.empty()) return kBackwardTiles[0];
  std::string allowed;
  for (const BackwardTiles& tiles : kBackwardTiles) {
    if (name == tiles.name) return tiles;
    allowed += (allowed.empty() ? "" : ", ") + std::string(tiles.name);
  }
  throw Error(ErrorKind::Usage,
              fmt::format("cpu-flash backward: kernel config '{}' unknown; allowed: {}", name, allowed));
}

// The layouts of the micro-kernel's A operand: row-major rows (A[r][k] = a[r·lda + k]), or
// read transposed (A[r][k] = a[k·lda + r]), which serves Pᵀ·dO and dSᵀ·Q straight from P and dS.
enum class ALayout { Rows, Transposed };

// c[r][0:16] (+)= Σ_{k<depth} A[r][k] · b[k·ldb + 0:16] for r < R. b and c 32-byte aligned.
// Forced inline: as an out-of-line function GCC 12 kept the accumulator array in memory too,
// storing all 12 accumulators to the stack every iteration (flash backward 2× slower).
template <int R, bool kAccumulate, ALayout kA>
__attribute__((always_inline)) inline void gemm_block(const float* a, std::int64_t lda, const float* b,
                                                      std::int64_t ldb, std::int64_t depth, float* c,
                                                      std::int64_t ldc) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = kAccumulate ? _mm256_load_ps(c + r * ldc) : _mm256_setzero_ps();
    acc[r][1] = kAccumulate ? _mm256_load_ps(c + r * ldc + 8) : _mm256_setzero_ps();
  }
  for (std::int64_t k = 0; k < depth; ++k) {
    const __m256 b0 = _mm256_load_ps(b + k * ldb);
    const __m256 b1 = _mm256_load_ps(b + k * ldb + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(kA == ALayout::Rows ? a + r * lda + k : a + k * lda + r);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(c + r * ldc, acc[r][0]);
    _mm256_store_ps(c + r * ldc + 8, acc[r][1]);
  }
}

// The rows left after the full register blocks (0 < count < kBlockRows): the micro-kernel for
// exactly that many rows.
template <bool kAccumulate, ALayout kA, int... kLess>
void gemm_tail(std::int64_t count, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
               std::int64_t depth, float* c, std::int64_t ldc, std::integer_sequence<int, kLess...>) {
  ((count == kLess + 1 ? gemm_block<kLess + 1, kAccumulate, kA>(a, lda, b, ldb, depth, c, ldc) : void()), ...);
}

// C[rows × cols] (+)= A[rows × depth]·B[depth × cols]; cols a multiple of 16. Column panels of B
// outside, so a panel (depth × 16 floats) stays in L1 while every row block passes over it.
template <bool kAccumulate, ALayout kA = ALayout::Rows>
void gemm(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
          std::int64_t rows, std::int64_t cols, std::int64_t depth) {
  const std::int64_t row_step = kA == ALayout::Rows ? lda : 1;  // from row r of A to row r + 1
  for (std::int64_t n = 0; n < cols; n += kBlockCols) {
    std::int64_t m = 0;
    for (; m + kBlockRows <= rows; m += kBlockRows)
      gemm_block<kBlockRows, kAccumulate, kA>(a + m * row_step, lda, b + n, ldb, depth, c + m * ldc + n, ldc);
    const float* a_tail = a + m * row_step;
    float* c_tail = c + m * ldc + n;
    gemm_tail<kAccumulate, kA>(rows - m, a_tail, lda, b + n, ldb, depth, c_tail, ldc,
                               std::make_integer_sequence<int, kBlockRows - 1>{});
  }
}

// A thread's buffers, carved from one tracked allocation (64-byte aligned pieces). Padding
// (columns past head_dim, rows past the valid keys or queries) is zero whenever a kernel reads it.
struct BackwardWorkspace {
  struct Sizes {
    std::int64_t head_dim, dim_v, d_pad, dv_pad, Br, Bc;
    std::int64_t seq_q_pad;  // rows of the packed Q and dO
    std::int64_t acc_keys;   // rows of the dK/dV accumulators: a tile, or a chunk with GQA
    bool own_dq;             // a dQ accumulator of its own (one chunk per unit)
  };
  HostBuffer buffer;
  float* query = nullptr;     // seq_q_pad × d_pad: Q of the current q head (A of S, B of dK)
  float* grad_out = nullptr;  // seq_q_pad × dv_pad: dO (A of dP, B of dV)
  float* dq = nullptr;        // seq_q_pad × d_pad: Σ dS·K of the current q head
  float* keys_t = nullptr;    // head_dim × Bc: Kᵀ of the key tile (B of S = Q·Kᵀ)
  float* values_t = nullptr;  // dim_v × Bc: Vᵀ (B of dP = dO·Vᵀ)
  float* keys = nullptr;      // Bc × d_pad: K (B of dQ += dS·K)
  float* dk = nullptr;        // acc_keys × d_pad: Σ dSᵀ·Q
  float* dv = nullptr;        // acc_keys × dv_pad: Σ Pᵀ·dO
  float* scores = nullptr;    // Br × Bc: S, then P
  float* grads = nullptr;     // Br × Bc: dP, then dS
  float* row = nullptr;       // one gradient row on its way out

  explicit BackwardWorkspace(const Sizes& sizes) {
    std::int64_t total = 0;
    carve(sizes, [&](std::int64_t floats) {
      total += round_up(floats, 16);
      return static_cast<float*>(nullptr);
    });
    buffer = HostBuffer(static_cast<std::size_t>(total) * sizeof(float));
    std::memset(buffer.data(), 0, buffer.bytes());
    float* next = buffer.as<float>();
    carve(sizes, [&](std::int64_t floats) {
      float* piece = next;
      next += round_up(floats, 16);
      return piece;
    });
  }

 private:
  template <class Take>
  void carve(const Sizes& s, Take&& take) {
    query = take(s.seq_q_pad * s.d_pad);
    grad_out = take(s.seq_q_pad * s.dv_pad);
    dq = s.own_dq ? take(s.seq_q_pad * s.d_pad) : nullptr;
    keys_t = take(s.head_dim * s.Bc);
    values_t = take(s.dim_v * s.Bc);
    keys = take(s.Bc * s.d_pad);
    dk = take(s.acc_keys * s.d_pad);
    dv = take(s.acc_keys * s.dv_pad);
    scores = take(s.Br * s.Bc);
    grads = take(s.Br * s.Bc);
    row = take(std::max(s.d_pad, s.dv_pad));
  }
};

class BackwardKernel {
 public:
  BackwardKernel(const AttentionProblem& problem, const BackwardArgs& args, const BackwardTiles& tiles, int threads)
      : problem_(problem),
        args_(args),
        head_dim_(problem.head_dim),
        dim_v_(problem.dim_v()),
        d_pad_(round_up(problem.head_dim, kBlockCols)),
        dv_pad_(round_up(problem.dim_v(), kBlockCols)),
        seq_q_pad_(round_up(problem.seq_q, 8)),
        Br_(tiles.query_tile),
        Bc_(tiles.key_tile),
        group_(problem.group_size()),
        units_(static_cast<std::int64_t>(problem.batch) * problem.heads_kv),
        key_tiles_((problem.seq_kv + Bc_ - 1) / Bc_),
        element_bytes_(static_cast<std::int64_t>(size_of(problem.dtype))),
        scale_(problem.softmax_scale()) {
    chunks_ = units_ >= threads ? 1 : std::min<std::int64_t>(key_tiles_, (threads + units_ - 1) / units_);
    split_keys();
  }

  std::int64_t chunks() const { return chunks_; }
  std::int64_t work_items() const { return units_ * chunks_; }
  std::int64_t seq_q_pad() const { return seq_q_pad_; }
  // One q head's dQ part: seq_q_pad × d_pad floats.
  std::int64_t dq_part_floats() const { return seq_q_pad_ * d_pad_; }

  BackwardWorkspace make_workspace() const {
    std::int64_t widest_chunk = 0;
    for (std::int64_t c = 0; c < chunks_; ++c)
      widest_chunk = std::max(widest_chunk, chunk_begin_[c + 1] - chunk_begin_[c]);
    return BackwardWorkspace({head_dim_, dim_v_, d_pad_, dv_pad_, Br_, Bc_, seq_q_pad_,
                              group_ == 1 ? Bc_ : widest_chunk * Bc_, chunks_ == 1});
  }

  // (LSE·log2 e, D = rowsum(dO∘O)) of every query row of one (batch, q head) into rows
  // (seq_q_pad pairs). Rows that see no key, and the padding, get +inf: P = exp2(-inf) = 0.
  void prepare_head(std::int64_t head_item, float* rows, BackwardWorkspace& ws) const {
    const std::int64_t b = head_item / problem_.heads_q, h = head_item % problem_.heads_q;
    const float* lse = args_.lse.data + head_item * problem_.seq_q;
    constexpr float kInf = std::numeric_limits<float>::infinity();
    float* o_row = ws.scores;  // free until the items run
    float* do_row = ws.grads;
    for (std::int64_t i = 0; i < problem_.seq_q; ++i) {
      const bool sees = problem_.key_begin(i) < problem_.key_end(i);
      rows[2 * i] = sees && lse[i] != -kInf ? lse[i] * kLog2e : kInf;
      load_row(args_.o, b, i, h, o_row, dim_v_);
      load_row(args_.d_o, b, i, h, do_row, dim_v_);
      __m256 acc = _mm256_setzero_ps();
      std::int64_t c = 0;
      for (; c + 8 <= dim_v_; c += 8) acc = _mm256_fmadd_ps(_mm256_load_ps(o_row + c), _mm256_load_ps(do_row + c), acc);
      float sum = simd::reduce_add(acc);
      for (; c < dim_v_; ++c) sum += o_row[c] * do_row[c];
      rows[2 * i + 1] = sum;
    }
    for (std::int64_t i = problem_.seq_q; i < seq_q_pad_; ++i) {
      rows[2 * i] = kInf;
      rows[2 * i + 1] = 0.0f;
    }
  }

  // One (unit, chunk): the chunk's keys' dK/dV (written here) and, per q head of the group, its
  // dQ part (unscaled): written here with one chunk, else left in parts[item·group + member].
  // rows: the prepared (LSE·log2 e, D) of every (batch, q head).
  void run_item(std::int64_t item, const float* rows, float* parts, BackwardWorkspace& ws) const {
    const std::int64_t unit = item / chunks_, chunk = item % chunks_;
    const std::int64_t b = unit / problem_.heads_kv, g = unit % problem_.heads_kv;
    const std::int64_t first_tile = chunk_begin_[chunk], end_tile = chunk_begin_[chunk + 1];
    if (first_tile == end_tile) {  // an empty chunk still owes its (zero) dQ parts
      for (std::int64_t member = 0; member < group_; ++member) {
        float* dq = parts + (item * group_ + member) * dq_part_floats();
        std::fill(dq, dq + dq_part_floats(), 0.0f);
      }
      return;
    }
    // With GQA the q heads of the group are the outer loop, so dK/dV accumulate over the whole
    // chunk and are written at the end; without, each key tile is final when its loop ends.
    if (group_ > 1) {
      const std::int64_t acc_keys = (end_tile - first_tile) * Bc_;
      std::fill(ws.dk, ws.dk + acc_keys * d_pad_, 0.0f);
      std::fill(ws.dv, ws.dv + acc_keys * dv_pad_, 0.0f);
    }
    for (std::int64_t member = 0; member < group_; ++member) {
      const std::int64_t h = g * group_ + member;
      const float* head_rows = rows + (b * problem_.heads_q + h) * seq_q_pad_ * 2;
      for (std::int64_t i = 0; i < problem_.seq_q; ++i) {
        load_row(args_.q, b, i, h, ws.query + i * d_pad_, head_dim_);
        load_row(args_.d_o, b, i, h, ws.grad_out + i * dv_pad_, dim_v_);
      }
      float* dq = chunks_ == 1 ? ws.dq : parts + (item * group_ + member) * dq_part_floats();
      std::fill(dq, dq + dq_part_floats(), 0.0f);
      for (std::int64_t tile = first_tile; tile < end_tile; ++tile) {
        const std::int64_t k0 = tile * Bc_;
        const std::int64_t cols = std::min<std::int64_t>(Bc_, problem_.seq_kv - k0);
        const std::int64_t key_rows = round_up(cols, kBlockCols);
        load_key_tile(b, g, k0, cols, ws);
        float* dk = ws.dk + (group_ > 1 ? (tile - first_tile) * Bc_ * d_pad_ : 0);
        float* dv = ws.dv + (group_ > 1 ? (tile - first_tile) * Bc_ * dv_pad_ : 0);
        if (group_ == 1) {
          std::fill(dk, dk + key_rows * d_pad_, 0.0f);
          std::fill(dv, dv + key_rows * dv_pad_, 0.0f);
        }
        for (std::int64_t q0 = 0; q0 < problem_.seq_q; q0 += Br_) {
          const std::int64_t count = std::min<std::int64_t>(Br_, problem_.seq_q - q0);
          // Keys any of these queries sees: begin and end are nondecreasing in the query index.
          const std::int64_t first_key = problem_.key_begin(q0);
          const std::int64_t last_key = problem_.key_end(q0 + count - 1);
          if (last_key <= k0 || first_key >= k0 + cols || first_key >= last_key) continue;
          const bool needs_mask = problem_.key_begin(q0 + count - 1) > k0 || problem_.key_end(q0) < k0 + key_rows;
          tile_pair(q0, count, k0, key_rows, needs_mask, head_rows, dq, dk, dv, ws);
        }
        if (group_ == 1) store_key_tile(b, g, k0, cols, dk, dv, ws);
      }
      if (chunks_ == 1) store_dq(b, h, dq, 0, 1, ws);
    }
    if (group_ > 1) {
      for (std::int64_t tile = first_tile; tile < end_tile; ++tile) {
        const std::int64_t k0 = tile * Bc_;
        store_key_tile(b, g, k0, std::min<std::int64_t>(Bc_, problem_.seq_kv - k0),
                       ws.dk + (tile - first_tile) * Bc_ * d_pad_, ws.dv + (tile - first_tile) * Bc_ * dv_pad_, ws);
      }
    }
  }

  // dQ of one (batch, q head) from the chunks' parts in parts (run_item's layout), summed in
  // chunk order.
  void store_dq_from_parts(std::int64_t head_item, const float* parts, BackwardWorkspace& ws) const {
    const std::int64_t b = head_item / problem_.heads_q, h = head_item % problem_.heads_q;
    const std::int64_t unit = head_item / group_, member = h % group_;
    store_dq(b, h, parts + (unit * chunks_ * group_ + member) * dq_part_floats(), group_ * dq_part_floats(), chunks_,
             ws);
  }

 private:
  // Splits the key tiles into chunks_ contiguous ranges of about equal visible pairs.
  void split_keys() {
    chunk_begin_.assign(static_cast<std::size_t>(chunks_ + 1), key_tiles_);
    chunk_begin_[0] = 0;
    if (chunks_ == 1) return;
    // Queries that see each key: a difference array over the rows' [begin, end).
    std::vector<std::int64_t> seen(static_cast<std::size_t>(problem_.seq_kv + 1), 0);
    for (std::int64_t i = 0; i < problem_.seq_q; ++i) {
      const std::int64_t begin = problem_.key_begin(i), end = problem_.key_end(i);
      if (begin >= end) continue;
      ++seen[begin];
      --seen[end];
    }
    std::vector<double> tile_work(static_cast<std::size_t>(key_tiles_), 0.0);
    std::int64_t running = 0;
    double total = 0;
    for (std::int64_t j = 0; j < problem_.seq_kv; ++j) {
      running += seen[j];
      const double work = static_cast<double>(running) + 1.0;  // + 1: loading a key costs too
      tile_work[j / Bc_] += work;
      total += work;
    }
    double done = 0;
    std::int64_t chunk = 1;
    for (std::int64_t tile = 0; tile < key_tiles_ && chunk < chunks_; ++tile) {
      done += tile_work[tile];
      while (chunk < chunks_ && done >= total * static_cast<double>(chunk) / static_cast<double>(chunks_))
        chunk_begin_[chunk++] = tile + 1;
    }
  }

  const char* element(const TensorView& view, std::int64_t b, std::int64_t s, std::int64_t h) const {
    return static_cast<const char*>(view.data) + view.offset(b, s, h, 0) * element_bytes_;
  }
  void load_row(const TensorView& view, std::int64_t b, std::int64_t s, std::int64_t h, float* dst,
                std::int64_t count) const {
    convert_to_float(element(view, b, s, h), problem_.dtype, dst, static_cast<std::size_t>(count));
  }
  void store_row(const TensorView& view, std::int64_t b, std::int64_t s, std::int64_t h, const float* src,
                 std::int64_t count) const {
    char* dst = static_cast<char*>(view.data) + view.offset(b, s, h, 0) * element_bytes_;
    if (problem_.dtype == DType::F32) {
      std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(float));
    } else {
      convert_from_float(src, dst, problem_.dtype, static_cast<std::size_t>(count));
    }
  }

  // K (row-major), Kᵀ and Vᵀ of keys [k0, k0 + cols); keys up to the next multiple of 16 zero.
  void load_key_tile(std::int64_t b, std::int64_t g, std::int64_t k0, std::int64_t cols, BackwardWorkspace& ws) const {
    const std::int64_t Bc = Bc_, key_rows = round_up(cols, kBlockCols);
    float* value = ws.row;
    for (std::int64_t j = 0; j < cols; ++j) {
      float* key = ws.keys + j * d_pad_;
      load_row(args_.k, b, k0 + j, g, key, head_dim_);
      for (std::int64_t d = 0; d < head_dim_; ++d) ws.keys_t[d * Bc + j] = key[d];
      load_row(args_.v, b, k0 + j, g, value, dim_v_);
      for (std::int64_t d = 0; d < dim_v_; ++d) ws.values_t[d * Bc + j] = value[d];
    }
    for (std::int64_t j = cols; j < key_rows; ++j) {
      std::fill(ws.keys + j * d_pad_, ws.keys + (j + 1) * d_pad_, 0.0f);
      for (std::int64_t d = 0; d < head_dim_; ++d) ws.keys_t[d * Bc + j] = 0.0f;
      for (std::int64_t d = 0; d < dim_v_; ++d) ws.values_t[d * Bc + j] = 0.0f;
    }
  }

  // dK = scale·Σ dSᵀ·Q and dV of keys [k0, k0 + cols) into the views.
  void store_key_tile(std::int64_t b, std::int64_t g, std::int64_t k0, std::int64_t cols, float* dk, const float* dv,
                      BackwardWorkspace&) const {
    const __m256 scale = _mm256_set1_ps(scale_);
    for (std::int64_t j = 0; j < cols; ++j) {
      float* dk_row = dk + j * d_pad_;
      for (std::int64_t c = 0; c < d_pad_; c += 8)
        _mm256_store_ps(dk_row + c, _mm256_mul_ps(_mm256_load_ps(dk_row + c), scale));
      store_row(args_.dk, b, k0 + j, g, dk_row, head_dim_);
      store_row(args_.dv, b, k0 + j, g, dv + j * dv_pad_, dim_v_);
    }
  }

  // dQ = scale·Σ of `count` parts (part_stride floats apart) into the view; rows that see no key
  // 0 exactly.
  void store_dq(std::int64_t b, std::int64_t h, const float* first, std::int64_t part_stride, std::int64_t count,
                BackwardWorkspace& ws) const {
    const __m256 scale = _mm256_set1_ps(scale_);
    float* out = ws.row;
    for (std::int64_t i = 0; i < problem_.seq_q; ++i) {
      if (problem_.key_begin(i) >= problem_.key_end(i)) {
        std::fill(out, out + d_pad_, 0.0f);
      } else {
        for (std::int64_t c = 0; c < d_pad_; c += 8) {
          __m256 sum = _mm256_load_ps(first + i * d_pad_ + c);
          for (std::int64_t part = 1; part < count; ++part)
            sum = _mm256_add_ps(sum, _mm256_load_ps(first + part * part_stride + i * d_pad_ + c));
          _mm256_store_ps(out + c, _mm256_mul_ps(sum, scale));
        }
      }
      store_row(args_.dq, b, i, h, out, head_dim_);
    }
  }

  // One (query tile, key tile): queries [q0, q0 + active) of the packed head, keys [k0, k0 +
  // key_rows) of the loaded tile (key_rows a multiple of 16; keys past seq_kv are zero and
  // hidden by the mask).
  void tile_pair(std::int64_t q0, std::int64_t active, std::int64_t k0, std::int64_t key_rows, bool needs_mask,
                 const float* head_rows, float* dq, float* dk, float* dv, BackwardWorkspace& ws) const {
    const std::int64_t Bc = Bc_;
    const float* query = ws.query + q0 * d_pad_;
    const float* grad_out = ws.grad_out + q0 * dv_pad_;
    gemm<false>(query, d_pad_, ws.keys_t, Bc, ws.scores, Bc, active, key_rows, head_dim_);
    gemm<false>(grad_out, dv_pad_, ws.values_t, Bc, ws.grads, Bc, active, key_rows, dim_v_);
    if (needs_mask) {
      softmax_grad<true>(q0, active, k0, key_rows, head_rows, ws);
    } else {
      softmax_grad<false>(q0, active, k0, key_rows, head_rows, ws);
    }
    gemm<true, ALayout::Transposed>(ws.scores, Bc, grad_out, dv_pad_, dv, dv_pad_, key_rows, dv_pad_, active);
    gemm<true, ALayout::Transposed>(ws.grads, Bc, query, d_pad_, dk, d_pad_, key_rows, d_pad_, active);
    gemm<true>(ws.grads, Bc, ws.keys, d_pad_, dq + q0 * d_pad_, d_pad_, active, d_pad_, key_rows);
  }

  // In place: scores → P = exp2(S·scale·log2 e − lse2), grads → dS = P∘(dP − D). With kMask,
  // P and dS are set to 0 (not multiplied) where a key is outside the query's [begin, end).
  template <bool kMask>
  void softmax_grad(std::int64_t q0, std::int64_t active, std::int64_t k0, std::int64_t key_rows,
                    const float* head_rows, BackwardWorkspace& ws) const {
    const std::int64_t Bc = Bc_;
    const __m256 score_scale = _mm256_set1_ps(scale_ * kLog2e);
    const __m256 zero = _mm256_setzero_ps();
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (std::int64_t i = 0; i < active; ++i) {
      const std::int64_t query = q0 + i;
      float* s = ws.scores + i * Bc;
      float* dp = ws.grads + i * Bc;
      const __m256 minus_lse2 = _mm256_set1_ps(-head_rows[2 * query]);
      const __m256 row_dot = _mm256_set1_ps(head_rows[2 * query + 1]);
      const bool valid = query < problem_.seq_q;  // padding rows see nothing
      const __m256i begin = _mm256_set1_epi32(valid ? static_cast<int>(problem_.key_begin(query)) : 0);
      const __m256i end = _mm256_set1_epi32(valid ? static_cast<int>(problem_.key_end(query)) : 0);
      for (std::int64_t j = 0; j < key_rows; j += 8) {
        __m256 p = simd::exp2_ps(_mm256_fmadd_ps(_mm256_load_ps(s + j), score_scale, minus_lse2));
        __m256 ds = _mm256_mul_ps(p, _mm256_sub_ps(_mm256_load_ps(dp + j), row_dot));
        if constexpr (kMask) {
          const __m256i key = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(k0 + j)), lanes);
          // hidden = key < begin || key >= end  ==  begin > key || !(end > key)
          const __m256i hidden = _mm256_or_si256(_mm256_cmpgt_epi32(begin, key),
                                                 _mm256_xor_si256(_mm256_cmpgt_epi32(end, key), _mm256_set1_epi32(-1)));
          p = _mm256_blendv_ps(p, zero, _mm256_castsi256_ps(hidden));
          ds = _mm256_blendv_ps(ds, zero, _mm256_castsi256_ps(hidden));
        }
        _mm256_store_ps(s + j, p);
        _mm256_store_ps(dp + j, ds);
      }
    }
  }

  const AttentionProblem& problem_;
  const BackwardArgs& args_;
  std::int64_t head_dim_, dim_v_, d_pad_, dv_pad_, seq_q_pad_;
  std::int64_t Br_, Bc_;
  std::int64_t group_, units_, key_tiles_, chunks_ = 1;
  std::vector<std::int64_t> chunk_begin_;  // chunk c covers key tiles [begin[c], begin[c + 1])
  std::int64_t element_bytes_;
  float scale_;
};

}  // namespace

std::vector<std::string> flash_backward_configs() {
  std::vector<std::string> names;
  for (const BackwardTiles& tiles : kBackwardTiles) names.emplace_back(tiles.name);
  return names;
}

void flash_backward(const AttentionProblem& problem, const BackwardArgs& args, int threads, std::string_view config) {
  const Support support = supports_common(problem);
  ATTNSUITE_CHECK(support.ok, ErrorKind::Unsupported, "cpu-flash: " + support.reason);
  check_backward_args("cpu-flash", problem, args, /*contiguous_last_dim=*/true);
  const BackwardTiles& tiles = find_tiles(config);
  threads = std::max(threads, 1);
  const BackwardKernel kernel(problem, args, tiles, threads);

  const std::int64_t heads = static_cast<std::int64_t>(problem.batch) * problem.heads_q;
  const int workers = static_cast<int>(std::min<std::int64_t>(threads, std::max(heads, kernel.work_items())));
  std::vector<BackwardWorkspace> workspaces;
  workspaces.reserve(static_cast<std::size_t>(workers));
  for (int t = 0; t < workers; ++t) workspaces.push_back(kernel.make_workspace());

  // (LSE·log2 e, D) of every query row: 8 bytes a row.
  const std::int64_t head_rows = kernel.seq_q_pad() * 2;
  HostBuffer rows(static_cast<std::size_t>(heads * head_rows) * sizeof(float));
  parallel_for(heads, workers, [&](std::int64_t head_item, int t) {
    kernel.prepare_head(head_item, rows.as<float>() + head_item * head_rows, workspaces[t]);
  });

  // With one chunk per unit each item writes its dQ itself (from its workspace); otherwise the
  // items leave dQ parts, one per (item, q head of the group), summed once all are done.
  HostBuffer parts;
  if (kernel.chunks() > 1)
    parts = HostBuffer(static_cast<std::size_t>(kernel.work_items() * problem.group_size() * kernel.dq_part_floats()) *
                       sizeof(float));
  parallel_for(kernel.work_items(), workers, [&](std::int64_t item, int t) {
    kernel.run_item(item, rows.as<float>(), parts.as<float>(), workspaces[t]);
  });
  if (kernel.chunks() == 1) return;
  parallel_for(heads, workers, [&](std::int64_t head_item, int t) {
    kernel.store_dq_from_parts(head_item, parts.as<float>(), workspaces[t]);
  });
}

}  // namespace attnsuite::cpu
