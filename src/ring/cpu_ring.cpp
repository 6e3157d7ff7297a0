#include "ring/cpu_ring.hpp"

#include <fmt/format.h>

#include <charconv>
#include <exception>
#include <limits>
#include <thread>
#include <vector>

#include "attnsuite/error.hpp"
#include "cpu/common.hpp"
#include "cpu/cpu_backends.hpp"
#include "ring/communicator.hpp"
#include "ring/lse_merge.hpp"
#include "ring/schedule.hpp"

namespace attnsuite::ring {

namespace {

constexpr int kDefaultWorld = 2;
constexpr int kMaxWorld = 64;

// One rank's K/V block in fp32: offsets and size in floats.
using BlockLayout = KvBlockLayout;
BlockLayout block_layout(const RingSchedule& schedule, const AttentionProblem& p, int rank) {
  return kv_block_layout(schedule, rank, p.batch, p.heads_kv, p.head_dim, p.dim_v(), 1);
}

// Copies tokens [begin, begin + length) of `view` (any dtype, any strides) into dense fp32
// (batch, length, heads, dim).
void gather_chunk(const TensorView& view, std::int64_t begin, std::int64_t length, float* out) {
  const std::int64_t heads = view.shape[2], dim = view.shape[3];
  for (std::int64_t b = 0; b < view.shape[0]; ++b)
    for (std::int64_t s = 0; s < length; ++s)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t d = 0; d < dim; ++d)
          *out++ = load_as_float(view.data, view.dtype, view.offset(b, begin + s, h, d));
}

TensorView dense_f32(float* data, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t dim) {
  TensorView view;
  view.data = data;
  view.dtype = DType::F32;
  view.shape = {batch, seq, heads, dim};
  view.strides = TensorView::dense_strides(view.shape, Layout::BSHD);
  return view;
}

class CpuRingBackend final : public IdentifiedBackend {
 public:
  CpuRingBackend()
      : IdentifiedBackend({"cpu-ring",
                           "Ring attention on simulated ranks (attnsuite; in-process communicator, cpu-flash blocks)",
                           {DeviceType::Cpu, 0},
                           fmt::format("fp32/fp16/bf16, W = {} simulated ranks (option ring_world), zigzag causal, "
                                       "LSE merge, GQA/MQA, seq_q == seq_kv >= 2W, no window",
                                       kDefaultWorld)}) {}

  Support supports(const AttentionProblem& problem) const override { return supports(problem, kDefaultWorld); }
  std::vector<std::string> option_keys() const override { return {"ring_world"}; }
  void check_options(const std::map<std::string, std::string>& options) const override { (void)parse_world(options); }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    const int world = parse_world(options.options);
    const Support support = supports(problem, world);
    if (!support) throw Error(ErrorKind::Unsupported, support.reason);
    choose_kernel_config(*this, problem, options);  // refuses a config: there is none
    return std::make_unique<FunctionPlan>(
        "", 0, [this, problem, world](const AttentionArgs& args, Stream, RunReport&) { run(problem, world, args); });
  }

 private:
  static int parse_world(const std::map<std::string, std::string>& options) {
    const auto found = options.find("ring_world");
    if (found == options.end()) return kDefaultWorld;
    const std::string& value = found->second;
    int world = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), world);
    if (error != std::errc() || end != value.data() + value.size() || world < 1 || world > kMaxWorld)
      throw Error(ErrorKind::Usage, fmt::format("cpu-ring: ring_world '{}' is not allowed: 1..{}", value, kMaxWorld));
    return world;
  }

  Support supports(const AttentionProblem& problem, int world) const {
    if (Support common = cpu::supports_common(problem); !common) return common;
    if (problem.seq_q != problem.seq_kv)
      return Support::no(fmt::format("cpu-ring: seq_q {} != seq_kv {}; the ring shards one sequence (needs Nq = Nk)",
                                     problem.seq_q, problem.seq_kv));
    if (problem.window_left >= 0 || problem.window_right >= 0)
      return Support::no("cpu-ring: sliding windows are not supported by the ring schedule");
    if (const std::string refusal = ring_refusal(world, problem.seq_q); !refusal.empty())
      return Support::no("cpu-" + refusal);
    return Support::yes();
  }

  void run(const AttentionProblem& problem, int world, const AttentionArgs& args) const {
    cpu::check_args(name(), problem, args, /*contiguous_last_dim=*/false);
    const RingSchedule schedule(world, problem.seq_q);
    auto comms = make_in_process_ring(world);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
    {
      std::vector<std::jthread> ranks;
      for (int r = 0; r < world; ++r)
        ranks.emplace_back([&, r] {
          try {
            run_rank(schedule, problem, args, *comms[static_cast<std::size_t>(r)]);
          } catch (...) {
            errors[static_cast<std::size_t>(r)] = std::current_exception();
            comms[static_cast<std::size_t>(r)]->abort();
          }
        });
    }
    // The first rank's own error, not a peer's "another rank failed".
    for (const auto& error : errors)
      if (error) {
        try {
          std::rethrow_exception(error);
        } catch (const Error& e) {
          if (std::string_view(e.what()).find("another rank failed") != std::string_view::npos) continue;
          throw;
        }
      }
    for (const auto& error : errors)
      if (error) std::rethrow_exception(error);
  }

  // One rank: its two query chunks against every K/V block as the blocks pass by.
  static void run_rank(const RingSchedule& schedule, const AttentionProblem& p, const AttentionArgs& args,
                       RingCommunicator& comm) {
    const int rank = comm.rank(), world = comm.world();
    const std::int64_t batch = p.batch, hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim, dv = p.dim_v();
    const auto mine = schedule.chunks_of(rank);
    const std::unique_ptr<Backend> kernel = cpu::make_flash_backend();

    std::vector<float> q[2], acc_o[2], acc_lse[2];
    for (int i = 0; i < 2; ++i) {
      const std::int64_t length = schedule.chunk_length(mine[i]);
      q[i].resize(static_cast<std::size_t>(batch * length * hq * d));
      gather_chunk(args.q, schedule.chunk_begin(mine[i]), length, q[i].data());
      acc_o[i].assign(static_cast<std::size_t>(batch * length * hq * dv), 0.0f);
      acc_lse[i].assign(static_cast<std::size_t>(batch * hq * length), -std::numeric_limits<float>::infinity());
    }
    // Two block buffers (the one computed on, the one being received), each as large as the
    // largest rank's block.
    std::int64_t largest = 0;
    for (int r = 0; r < world; ++r) largest = std::max(largest, block_layout(schedule, p, r).size);
    std::vector<float> current(static_cast<std::size_t>(largest)), next(static_cast<std::size_t>(largest));
    {
      const BlockLayout own = block_layout(schedule, p, rank);
      for (int i = 0; i < 2; ++i) {
        gather_chunk(args.k, schedule.chunk_begin(mine[i]), own.length[i], current.data() + own.k_offset[i]);
        gather_chunk(args.v, schedule.chunk_begin(mine[i]), own.length[i], current.data() + own.v_offset[i]);
      }
    }

    std::vector<float> part_o, part_lse;
    for (int step = 0; step < world; ++step) {
      const int source = schedule.kv_source(rank, step);
      const BlockLayout block = block_layout(schedule, p, source);
      if (step + 1 < world) {
        const BlockLayout incoming = block_layout(schedule, p, schedule.kv_source(rank, step + 1));
        comm.start_exchange(current.data(), static_cast<std::size_t>(block.size) * sizeof(float), next.data(),
                            static_cast<std::size_t>(incoming.size) * sizeof(float));
      }
      const auto source_chunks = schedule.chunks_of(source);
      for (const ChunkPair& pair : schedule.pairs(rank, step, p.causal)) {
        const int qi = pair.q_chunk == mine[0] ? 0 : 1;
        const int ki = pair.kv_chunk == source_chunks[0] ? 0 : 1;
        const std::int64_t lq = schedule.chunk_length(pair.q_chunk), lk = block.length[ki];
        AttentionProblem sub = p;
        sub.dtype = DType::F32;
        sub.layout = Layout::BSHD;
        sub.seq_q = static_cast<int>(lq);
        sub.seq_kv = static_cast<int>(lk);
        sub.causal = pair.kind == PairKind::Diagonal;  // square: top-left = bottom-right aligned
        sub.scale = p.softmax_scale();
        part_o.resize(static_cast<std::size_t>(batch * lq * hq * dv));
        part_lse.resize(static_cast<std::size_t>(batch * hq * lq));
        AttentionArgs local;
        local.q = dense_f32(q[qi].data(), batch, lq, hq, d);
        local.k = dense_f32(current.data() + block.k_offset[ki], batch, lk, hkv, d);
        local.v = dense_f32(current.data() + block.v_offset[ki], batch, lk, hkv, dv);
        local.o = dense_f32(part_o.data(), batch, lq, hq, dv);
        local.lse = {part_lse.data(), Device{}};
        kernel->forward(sub, local, nullptr);
        for (std::int64_t b = 0; b < batch; ++b)
          for (std::int64_t s = 0; s < lq; ++s)
            for (std::int64_t h = 0; h < hq; ++h) {
              const std::int64_t row = (b * lq + s) * hq + h, lse_index = (b * hq + h) * lq + s;
              merge_row(acc_o[qi].data() + row * dv, acc_lse[qi].data() + lse_index, part_o.data() + row * dv,
                        part_lse[static_cast<std::size_t>(lse_index)], static_cast<int>(dv));
            }
      }
      if (step + 1 < world) {
        comm.wait_exchange();
        std::swap(current, next);
      }
    }

    // Each rank writes its own rows of O (and LSE): disjoint token ranges.
    for (int i = 0; i < 2; ++i) {
      const std::int64_t begin = schedule.chunk_begin(mine[i]), length = schedule.chunk_length(mine[i]);
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t s = 0; s < length; ++s)
          for (std::int64_t h = 0; h < hq; ++h) {
            const float* row = acc_o[i].data() + ((b * length + s) * hq + h) * dv;
            for (std::int64_t e = 0; e < dv; ++e)
              store_from_float(args.o.data, args.o.dtype, args.o.offset(b, begin + s, h, e), row[e]);
            if (!args.lse.empty())
              args.lse.data[(b * hq + h) * p.seq_q + begin + s] =
                  acc_lse[i][static_cast<std::size_t>((b * hq + h) * length + s)];
          }
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_ring_backend() { return std::make_unique<CpuRingBackend>(); }

}  // namespace attnsuite::ring
