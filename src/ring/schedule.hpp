// The ring's schedule (issue 10, docs/multi-gpu.md): how a sequence of N tokens is cut into 2W
// chunks, which two chunks each of the W ranks holds (zigzag: chunk r and chunk 2W−1−r), whose
// K/V block a rank holds at each step of the ring, and which (query chunk, key chunk) pairs it
// computes then. Shared by cpu-ring and the CUDA ring; no device code.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace attnsuite::ring {

// How a query chunk meets a key chunk. Chunks of one sequence are cut at the same points for Q
// and K/V (seq_q == seq_kv), so the diagonal pair is square and causal within itself.
enum class PairKind {
  Full,      // every query sees every key (non-causal, or the key chunk lies before the query chunk)
  Diagonal,  // the same chunk: causal within it
};

struct ChunkPair {
  int q_chunk = 0;
  int kv_chunk = 0;
  PairKind kind = PairKind::Full;
};

class RingSchedule {
 public:
  // Throws Error(Usage) unless world >= 1 and seq >= 2 × world (every chunk non-empty).
  RingSchedule(int world, std::int64_t seq);

  int world() const { return world_; }
  std::int64_t seq() const { return seq_; }
  int chunks() const { return 2 * world_; }
  // Chunk c covers tokens [begin, end): c·N/(2W) rounded down, so lengths differ by at most one
  // (any N >= 2W works; no padding).
  std::int64_t chunk_begin(int chunk) const;
  std::int64_t chunk_end(int chunk) const { return chunk_begin(chunk + 1); }
  std::int64_t chunk_length(int chunk) const { return chunk_end(chunk) - chunk_begin(chunk); }

  // The chunks rank r holds (of Q, K and V alike): {r, 2W−1−r}, lower first.
  std::array<int, 2> chunks_of(int rank) const { return {rank, 2 * world_ - 1 - rank}; }
  // The rank whose K/V block rank r holds at ring step s (0 ≤ s < W): blocks travel to rank+1.
  int kv_source(int rank, int step) const { return ((rank - step) % world_ + world_) % world_; }
  // The pairs rank r computes at step s: its two query chunks against the two key chunks of
  // kv_source(r, s). Causal: a key chunk after the query chunk is skipped, the same chunk is
  // Diagonal, an earlier one Full.
  std::vector<ChunkPair> pairs(int rank, int step, bool causal) const;

 private:
  int world_;
  std::int64_t seq_;
};

// Where rank r's K/V block keeps its two chunks, packed [K lo | K hi | V lo | V hi], each dense
// (batch, chunk length, heads_kv, dim): offsets and the total in units of `element` (1 for a
// count of elements, e.g. cpu-ring's fp32 blocks; the dtype's size for bytes, the CUDA ring's).
struct KvBlockLayout {
  std::int64_t k_offset[2], v_offset[2], length[2], size = 0;
};
KvBlockLayout kv_block_layout(const RingSchedule& schedule, int rank, std::int64_t batch, std::int64_t heads_kv,
                              std::int64_t head_dim, std::int64_t dim_v, std::int64_t element);

// Why the ring cannot run a sequence of `seq` tokens on `world` ranks; empty when it can.
std::string ring_refusal(int world, std::int64_t seq);

}  // namespace attnsuite::ring
