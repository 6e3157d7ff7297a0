#include "ring/schedule.hpp"

#include <fmt/format.h>

#include "attnsuite/error.hpp"

namespace attnsuite::ring {

std::string ring_refusal(int world, std::int64_t seq) {
  if (world < 1) return fmt::format("ring: {} ranks; need at least 1", world);
  if (seq < 2 * static_cast<std::int64_t>(world))
    return fmt::format("ring: sequence of {} tokens is shorter than the 2 × {} = {} chunks of a {}-rank zigzag ring",
                       seq, world, 2 * world, world);
  return {};
}

RingSchedule::RingSchedule(int world, std::int64_t seq) : world_(world), seq_(seq) {
  const std::string refusal = ring_refusal(world, seq);
  if (!refusal.empty()) throw Error(ErrorKind::Usage, refusal);
}

std::int64_t RingSchedule::chunk_begin(int chunk) const { return static_cast<std::int64_t>(chunk) * seq_ / chunks(); }

std::vector<ChunkPair> RingSchedule::pairs(int rank, int step, bool causal) const {
  std::vector<ChunkPair> out;
  const int source = kv_source(rank, step);
  for (int q_chunk : chunks_of(rank))
    for (int kv_chunk : chunks_of(source)) {
      if (!causal) {
        out.push_back({q_chunk, kv_chunk, PairKind::Full});
      } else if (kv_chunk < q_chunk) {
        out.push_back({q_chunk, kv_chunk, PairKind::Full});
      } else if (kv_chunk == q_chunk) {
        out.push_back({q_chunk, kv_chunk, PairKind::Diagonal});
      }
    }
  return out;
}

KvBlockLayout kv_block_layout(const RingSchedule& schedule, int rank, std::int64_t batch, std::int64_t heads_kv,
                              std::int64_t head_dim, std::int64_t dim_v, std::int64_t element) {
  KvBlockLayout layout;
  const auto chunks = schedule.chunks_of(rank);
  for (int i = 0; i < 2; ++i) layout.length[i] = schedule.chunk_length(chunks[i]);
  const std::int64_t k_row = heads_kv * head_dim * element;
  const std::int64_t v_row = heads_kv * dim_v * element;
  layout.k_offset[0] = 0;
  layout.k_offset[1] = batch * layout.length[0] * k_row;
  layout.v_offset[0] = layout.k_offset[1] + batch * layout.length[1] * k_row;
  layout.v_offset[1] = layout.v_offset[0] + batch * layout.length[0] * v_row;
  layout.size = layout.v_offset[1] + batch * layout.length[1] * v_row;
  return layout;
}

}  // namespace attnsuite::ring
