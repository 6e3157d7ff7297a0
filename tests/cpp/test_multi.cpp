// Issue 10 without several GPUs: the ring's schedule and LSE merge, cpu-ring against the fp64
// reference, the in-process communicator, shard variables, sharded sweeps in real processes
// merged and compared with a single run, and merge's refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "attnsuite/attnsuite.hpp"
#include "bench/gpu_workers.hpp"
#include "bench/runner.hpp"
#include "cli_test_support.hpp"
#include "cpu/cpu_backends.hpp"
#include "gpu_test_support.hpp"
#include "report/jsonl.hpp"
#include "report/shard.hpp"
#include "report/sweep.hpp"
#include "ring/communicator.hpp"
#include "ring/cpu_ring.hpp"
#include "ring/lse_merge.hpp"
#include "ring/schedule.hpp"

namespace attnsuite {
namespace {

using testing_support::run_cli;
using testing_support::scratch;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// --- LSE merge ------------------------------------------------------------------------------------

TEST(RingMerge, MatchesTheDirectFormulaOnRandomPartials) {
  std::mt19937 rng(7);
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::uniform_real_distribution<float> lse_value(-30.0f, 30.0f);
  const int dv = 5;
  for (int trial = 0; trial < 200; ++trial) {
    const int parts = 1 + trial % 6;
    std::vector<std::vector<float>> o(parts, std::vector<float>(dv));
    std::vector<float> lse(parts);
    for (int i = 0; i < parts; ++i) {
      for (float& x : o[i]) x = value(rng);
      // Fully masked partials (lse = -inf, O = 0) among them, all of them in some trials.
      lse[i] = (trial + i) % 4 == 0 || trial % 17 == 0 ? kNegInf : lse_value(rng);
      if (lse[i] == kNegInf) std::fill(o[i].begin(), o[i].end(), 0.0f);
    }
    std::vector<float> acc(dv, 0.0f);
    float acc_lse = kNegInf;
    for (int i = 0; i < parts; ++i) ring::merge_row(acc.data(), &acc_lse, o[i].data(), lse[i], dv);

    // O = Σ exp(lse_i − lse) O_i, lse = log Σ exp(lse_i), in double.
    double max_lse = -std::numeric_limits<double>::infinity();
    for (float l : lse) max_lse = std::max<double>(max_lse, l);
    if (std::isinf(max_lse)) {
      EXPECT_EQ(acc_lse, kNegInf);
      for (float x : acc) EXPECT_EQ(x, 0.0f);
      continue;
    }
    double sum = 0;
    for (float l : lse) sum += std::exp(static_cast<double>(l) - max_lse);
    const double expected_lse = max_lse + std::log(sum);
    EXPECT_NEAR(acc_lse, expected_lse, 1e-5 * std::max(1.0, std::abs(expected_lse))) << "trial " << trial;
    for (int d = 0; d < dv; ++d) {
      double expected = 0;
      for (int i = 0; i < parts; ++i) expected += std::exp(static_cast<double>(lse[i]) - expected_lse) * o[i][d];
      EXPECT_NEAR(acc[d], expected, 1e-5) << "trial " << trial << " d " << d;
    }
  }
}

TEST(RingMerge, RowsLayout) {
  // merge_partials is merge_row over dense rows.
  std::vector<float> acc{1, 2, 3, 4}, acc_lse{0.0f, kNegInf};
  const std::vector<float> part{5, 6, 7, 8}, part_lse{0.0f, 1.0f};
  ring::merge_partials(acc.data(), acc_lse.data(), part.data(), part_lse.data(), 2, 2);
  EXPECT_FLOAT_EQ(acc[0], 3.0f);  // equal weights
  EXPECT_FLOAT_EQ(acc[1], 4.0f);
  EXPECT_FLOAT_EQ(acc_lse[0], std::log(2.0f));
  EXPECT_FLOAT_EQ(acc[2], 7.0f);  // the accumulator saw nothing: takes the partial
  EXPECT_FLOAT_EQ(acc_lse[1], 1.0f);
}

// --- Zigzag schedule --------------------------------------------------------------------------------

TEST(RingSchedule, ChunksCoverTheSequenceEvenly) {
  for (int world : {1, 2, 3, 4, 5, 8}) {
    for (std::int64_t seq : {std::int64_t{2} * world, std::int64_t{37}, std::int64_t{1000}, std::int64_t{4097}}) {
      if (seq < 2 * world) continue;
      const ring::RingSchedule s(world, seq);
      EXPECT_EQ(s.chunk_begin(0), 0);
      EXPECT_EQ(s.chunk_end(s.chunks() - 1), seq);
      std::int64_t shortest = seq, longest = 0;
      for (int c = 0; c < s.chunks(); ++c) {
        shortest = std::min(shortest, s.chunk_length(c));
        longest = std::max(longest, s.chunk_length(c));
      }
      EXPECT_GE(shortest, 1);
      EXPECT_LE(longest - shortest, 1) << "W " << world << " N " << seq;
      // Every chunk belongs to exactly one rank.
      std::multiset<int> held;
      for (int r = 0; r < world; ++r)
        for (int c : s.chunks_of(r)) held.insert(c);
      for (int c = 0; c < s.chunks(); ++c) EXPECT_EQ(held.count(c), 1u);
    }
  }
}

TEST(RingSchedule, EveryPairOnceCausalSkipsExactlyTheInvisibleAndWorkIsBalanced) {
  for (int world = 1; world <= 8; ++world) {
    const ring::RingSchedule s(world, 16 * world + 3);
    for (bool causal : {false, true}) {
      std::map<std::pair<int, int>, int> visits;
      std::vector<int> work(world, 0);  // in half chunk-pairs: Full = 2, Diagonal = 1
      for (int r = 0; r < world; ++r) {
        std::set<int> sources;
        for (int step = 0; step < world; ++step) {
          sources.insert(s.kv_source(r, step));
          for (const auto& pair : s.pairs(r, step, causal)) {
            ++visits[std::make_pair(pair.q_chunk, pair.kv_chunk)];
            const auto mine = s.chunks_of(r);
            EXPECT_TRUE(pair.q_chunk == mine[0] || pair.q_chunk == mine[1]);
            EXPECT_EQ(pair.kind == ring::PairKind::Diagonal, causal && pair.q_chunk == pair.kv_chunk);
            work[r] += pair.kind == ring::PairKind::Full ? 2 : 1;
          }
        }
        EXPECT_EQ(static_cast<int>(sources.size()), world) << "rank " << r << " does not see every block";
        EXPECT_EQ(s.kv_source(r, 0), r);
      }
      for (int q = 0; q < s.chunks(); ++q)
        for (int k = 0; k < s.chunks(); ++k) {
          const int expected = causal && k > q ? 0 : 1;  // causal: a later chunk is invisible
          EXPECT_EQ(visits[std::make_pair(q, k)], expected)
              << "W " << world << " causal " << causal << " pair " << q << "," << k;
        }
      const auto [lo, hi] = std::minmax_element(work.begin(), work.end());
      EXPECT_LE(*hi - *lo, 2) << "W " << world << " causal " << causal << ": work differs by more than 1 chunk-pair";
    }
  }
}

TEST(RingSchedule, RefusesTooShortSequences) {
  EXPECT_THROW(ring::RingSchedule(4, 7), Error);
  EXPECT_THROW(ring::RingSchedule(0, 7), Error);
  EXPECT_NE(ring::ring_refusal(4, 7).find("shorter than the 2 × 4 = 8 chunks"), std::string::npos);
  EXPECT_TRUE(ring::ring_refusal(4, 8).empty());
}

// --- In-process communicator -------------------------------------------------------------------------

// A rank's packed K/V block: [K lo | K hi | V lo | V hi], each (batch, chunk, heads_kv, dim); the
// same layout in elements (cpu-ring) and in bytes (the CUDA ring: the element size times).
TEST(RingSchedule, KvBlockLayoutPacksBothChunksOfKThenV) {
  const ring::RingSchedule schedule(2, 10);  // chunks of 2, 3, 2, 3 tokens; rank 0 holds 0 and 3
  const ring::KvBlockLayout e = ring::kv_block_layout(schedule, 0, 2, 3, 4, 5, 1);
  EXPECT_EQ(e.length[0], 2);
  EXPECT_EQ(e.length[1], 3);
  EXPECT_EQ(e.k_offset[0], 0);
  EXPECT_EQ(e.k_offset[1], 2 * 2 * 3 * 4);
  EXPECT_EQ(e.v_offset[0], e.k_offset[1] + 2 * 3 * 3 * 4);
  EXPECT_EQ(e.v_offset[1], e.v_offset[0] + 2 * 2 * 3 * 5);
  EXPECT_EQ(e.size, e.v_offset[1] + 2 * 3 * 3 * 5);
  const ring::KvBlockLayout b = ring::kv_block_layout(schedule, 0, 2, 3, 4, 5, 2);
  EXPECT_EQ(b.v_offset[1], 2 * e.v_offset[1]);
  EXPECT_EQ(b.size, 2 * e.size);
}

TEST(RingCommunicator, PassesBlocksAroundTheRing) {
  for (int world : {1, 2, 3, 5}) {
    auto comms = ring::make_in_process_ring(world);
    std::vector<std::vector<int>> got(world);
    {
      std::vector<std::jthread> threads;
      for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
          // W − 1 steps: each rank ends up having seen every other rank's block once.
          std::vector<int> current{r, r * 10}, next(2);
          for (int step = 0; step + 1 < world; ++step) {
            comms[r]->start_exchange(current.data(), sizeof(int) * 2, next.data(), sizeof(int) * 2);
            comms[r]->wait_exchange();
            std::swap(current, next);
            got[r].push_back(current[0]);
            EXPECT_EQ(current[1], current[0] * 10);
          }
        });
    }
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(static_cast<int>(got[r].size()), world - 1);
      for (int step = 0; step + 1 < world; ++step) EXPECT_EQ(got[r][step], ((r - step - 1) % world + world) % world);
    }
  }
}

TEST(RingCommunicator, SizeMismatchAndAbortDoNotHang) {
  auto comms = ring::make_in_process_ring(2);
  std::vector<std::string> errors(2);
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        char send[8] = {}, recv[8] = {};
        try {
          comms[r]->start_exchange(send, r == 0 ? 8 : 4, recv, 8);
          comms[r]->wait_exchange();
        } catch (const Error& e) {
          errors[r] = e.what();
          comms[r]->abort();
        }
      });
  }
  // Rank 0 receives 4 bytes from rank 1 where it expects 8; rank 1 is released by the failure.
  EXPECT_NE(errors[0].find("expected 8 bytes from rank 1, which sent 4"), std::string::npos) << errors[0];
  EXPECT_FALSE(errors[1].empty());
}

// --- cpu-ring against the fp64 reference -----------------------------------------------------------------

struct RingCase {
  int world;
  bool causal;
  int heads_q, heads_kv, seq;
  DType dtype;
  Layout layout = Layout::BSHD;
};

std::string ring_case_name(const ::testing::TestParamInfo<RingCase>& info) {
  const RingCase& c = info.param;
  return "W" + std::to_string(c.world) + (c.causal ? "_causal" : "_full") + "_H" + std::to_string(c.heads_q) + "_" +
         std::to_string(c.heads_kv) + "_N" + std::to_string(c.seq) + "_" + std::string(to_string(c.dtype)) +
         (c.layout == Layout::BHSD ? "_bhsd" : "");
}

class CpuRing : public ::testing::TestWithParam<RingCase> {};

TEST_P(CpuRing, MatchesTheReference) {
  const RingCase& rc = GetParam();
  AttentionProblem p;
  p.batch = 2;
  p.heads_q = rc.heads_q;
  p.heads_kv = rc.heads_kv;
  p.seq_q = p.seq_kv = rc.seq;
  p.head_dim = 32;
  p.dtype = rc.dtype;
  p.layout = rc.layout;
  p.causal = rc.causal;

  std::mt19937 rng(static_cast<unsigned>(rc.seq * 131 + rc.world));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto tensor = [&](std::int64_t seq, std::int64_t heads, std::vector<unsigned char>& bytes) {
    TensorView view;
    view.dtype = p.dtype;
    view.shape = {p.batch, seq, heads, p.head_dim};
    view.strides = TensorView::dense_strides(view.shape, p.layout);
    bytes.resize(static_cast<std::size_t>(view.numel()) * size_of(p.dtype));
    view.data = bytes.data();
    for (std::int64_t i = 0; i < view.numel(); ++i) store_from_float(view.data, p.dtype, i, normal(rng));
    return view;
  };
  std::vector<unsigned char> qb, kb, vb, ob;
  AttentionArgs args;
  args.q = tensor(p.seq_q, p.heads_q, qb);
  args.k = tensor(p.seq_kv, p.heads_kv, kb);
  args.v = tensor(p.seq_kv, p.heads_kv, vb);
  args.o = tensor(p.seq_q, p.heads_q, ob);
  // Poisoned: a row the ring never writes is NaN and fails.
  for (std::int64_t i = 0; i < args.o.numel(); ++i)
    store_from_float(args.o.data, p.dtype, i, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> lse(static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q,
                         std::numeric_limits<float>::quiet_NaN());
  args.lse = {lse.data(), Device{}};

  auto backend = ring::make_cpu_ring_backend();
  PlanOptions options;
  options.options["ring_world"] = std::to_string(rc.world);
  backend->forward(p, args, nullptr, options);

  // The bound: fp32 accumulation throughout (partials merged in fp32, rounded once), so the
  // error against fp64 is the output dtype's rounding plus fp32 noise.
  const double bound = p.dtype == DType::F32 ? 2e-5 : p.dtype == DType::BF16 ? 1.6e-2 : 2e-3;
  double worst = 0, worst_lse = 0;
  std::vector<double> ref_o(static_cast<std::size_t>(p.seq_q) * p.dim_v()), ref_lse(static_cast<std::size_t>(p.seq_q));
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      cpu::reference_head_f64(p, args, b, h, ref_o.data(), ref_lse.data());
      for (int s = 0; s < p.seq_q; ++s) {
        for (int d = 0; d < p.dim_v(); ++d) {
          const float got = load_as_float(args.o.data, p.dtype, args.o.offset(b, s, h, d));
          ASSERT_TRUE(std::isfinite(got)) << "b " << b << " h " << h << " s " << s;
          worst = std::max(worst, std::abs(got - ref_o[static_cast<std::size_t>(s) * p.dim_v() + d]));
        }
        worst_lse = std::max(worst_lse, std::abs(lse[(static_cast<std::size_t>(b) * p.heads_q + h) * p.seq_q + s] -
                                                 ref_lse[static_cast<std::size_t>(s)]));
      }
    }
  EXPECT_LE(worst, bound);
  EXPECT_LE(worst_lse, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    WorldsMasksGqa, CpuRing,
    ::testing::Values(RingCase{1, false, 4, 4, 64, DType::F32}, RingCase{1, true, 4, 4, 64, DType::F32},
                      RingCase{2, false, 4, 4, 64, DType::F32}, RingCase{2, true, 4, 4, 64, DType::F32},
                      RingCase{3, false, 4, 2, 61, DType::F32}, RingCase{3, true, 4, 2, 61, DType::F32},
                      RingCase{4, false, 4, 1, 77, DType::F32}, RingCase{4, true, 4, 1, 77, DType::F32},
                      RingCase{4, true, 6, 2, 8, DType::F32},  // one token per chunk
                      RingCase{3, true, 4, 2, 100, DType::BF16}, RingCase{2, true, 4, 4, 50, DType::F16},
                      RingCase{3, true, 4, 2, 45, DType::F32, Layout::BHSD}),
    ring_case_name);

TEST(CpuRingSupport, RefusesWhatTheRingCannotShard) {
  auto backend = ring::make_cpu_ring_backend();
  PlanOptions world4;
  world4.options["ring_world"] = "4";
  // The reason plan() refuses with (Error(Unsupported)), or "" when it plans.
  const auto refusal = [&](const AttentionProblem& problem, const PlanOptions& options) -> std::string {
    try {
      (void)backend->plan(problem, options);
      return "";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Unsupported) << error.what();
      return error.what();
    }
  };
  AttentionProblem p;
  p.head_dim = 32;
  p.seq_q = p.seq_kv = 7;
  EXPECT_NE(refusal(p, world4).find("shorter than the 2 × 4 = 8 chunks"), std::string::npos) << refusal(p, world4);
  p.seq_q = 64;
  p.seq_kv = 32;
  EXPECT_NE(refusal(p, world4).find("needs Nq = Nk"), std::string::npos);
  EXPECT_NE(backend->supports(p).reason.find("needs Nq = Nk"), std::string::npos);
  p.seq_kv = 64;
  p.window_left = 8;
  EXPECT_NE(refusal(p, world4).find("sliding windows"), std::string::npos);
  p.window_left = -1;
  EXPECT_EQ(refusal(p, world4), "");
  for (const char* bad : {"0", "x"}) {
    PlanOptions options;
    options.options["ring_world"] = bad;
    EXPECT_THROW(backend->plan(p, options), Error) << bad;
  }
  EXPECT_EQ(backend->option_keys(), std::vector<std::string>{"ring_world"});
}

// --- The --gpus pool, with CPU workers ----------------------------------------------------------------

TEST(Workers, ThreeWorkersGiveTheRowsOfOneRunnerEachCaseOnce) {
  bench::SweepSpec spec;
  spec.backends = {"cpu-flash", "reference", "cpu-ring"};
  spec.dtypes = {DType::F32};
  spec.seq_q = {40, 64, 90, 33};
  spec.heads = {bench::HeadConfig{2, 1, 32, ""}};
  spec.causal = {false, true};
  spec.timing.cold = false;
  spec.timing.measure.warmup_reps = 0;
  spec.timing.measure.min_reps = 1;
  spec.timing.measure.max_reps = 1;
  const std::vector<bench::Case> cases = bench::expand(spec);
  std::vector<bench::IndexedCase> todo;
  for (std::size_t i = 0; i < cases.size(); ++i) todo.push_back({i, &cases[i]});

  std::vector<bench::ResultRow> serial_rows;
  {
    bench::Runner serial(spec, Registry::global());
    for (const auto& c : cases) serial_rows.push_back(*serial.run(c));
  }

  // `reference` runs after the workers, on the calling thread; the others on 3 workers.
  std::vector<std::optional<bench::ResultRow>> rows(cases.size());
  std::set<int> workers_seen;
  bench::GpuWorkCallbacks callbacks;
  bool reference_started_early = false;
  std::size_t finished = 0;
  callbacks.on_start = [&](const bench::IndexedCase& item, int worker) {
    if (worker >= 0 && item.c->backend == "reference") reference_started_early = true;
  };
  callbacks.on_row = [&](const bench::IndexedCase& item, int worker, bench::ResultRow row) {
    EXPECT_FALSE(rows[item.index].has_value()) << "case " << item.index << " ran twice";
    EXPECT_EQ(worker < 0, item.c->backend == "reference");
    if (item.c->backend == "reference") {
      EXPECT_GE(finished, cases.size() - cases.size() / 3);  // after every worker row
    }
    workers_seen.insert(worker);
    rows[item.index] = std::move(row);
    ++finished;
  };
  bench::Runner serial(spec, Registry::global());
  const bool interrupted = bench::run_on_workers(
      3, todo, [](const bench::Case& c) { return c.backend != "reference"; },
      [&](int) {
        bench::Worker worker;
        worker.registry = std::make_unique<Registry>();
        register_builtin_backends(*worker.registry);
        worker.runner = std::make_unique<bench::Runner>(spec, *worker.registry);
        return worker;
      },
      [](int w) { return "worker " + std::to_string(w); }, serial, callbacks);
  EXPECT_FALSE(interrupted);
  EXPECT_FALSE(reference_started_early);
  EXPECT_TRUE(workers_seen.contains(-1));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(rows[i].has_value()) << "case " << i << " never ran";
    const auto a = bench::to_json(serial_rows[i]), b = bench::to_json(*rows[i]);
    for (const char* column : {"backend", "seq_q", "causal", "status", "max_abs_err", "rel_l2", "rmse"})
      EXPECT_EQ(a[column], b[column]) << "case " << i << " column " << column;
  }
}

TEST(Workers, AWorkerThatCannotStartStopsThePoolWithItsName) {
  bench::SweepSpec spec;
  spec.backends = {"cpu-flash"};
  spec.seq_q = {32, 48};
  const std::vector<bench::Case> cases = bench::expand(spec);
  std::vector<bench::IndexedCase> todo;
  for (std::size_t i = 0; i < cases.size(); ++i) todo.push_back({i, &cases[i]});
  bench::Runner serial(spec, Registry::global());
  try {
    bench::run_on_workers(
        2, todo, [](const bench::Case&) { return true; },
        [](int w) -> bench::Worker { throw Error(ErrorKind::Device, "no such device " + std::to_string(w)); },
        [](int w) { return "GPU " + std::to_string(w); }, serial, {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    EXPECT_NE(std::string(e.what()).find(": no such device"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("GPU ", 0), 0u) << e.what();
  }
}

// --- Shards from the environment -------------------------------------------------------------------------

std::optional<bench::ShardInfo> shard_with(const std::map<std::string, std::string>& env) {
  return bench::shard_from_environment([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ShardEnvironment, EachLauncher) {
  EXPECT_FALSE(shard_with({}).has_value());
  auto s =
      shard_with({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->world, 4);
  EXPECT_EQ(s->local_rank, 2);
  s = shard_with({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 1);
  EXPECT_EQ(s->local_rank, -1);
  s = shard_with({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 5);
  EXPECT_EQ(s->world, 8);
  EXPECT_EQ(s->local_rank, 1);
  // A Slurm array 3-9:2 (3, 5, 7, 9): task 7 is rank 2 of 4.
  s = shard_with({{"SLURM_ARRAY_TASK_ID", "7"},
                  {"SLURM_ARRAY_TASK_MIN", "3"},
                  {"SLURM_ARRAY_TASK_MAX", "9"},
                  {"SLURM_ARRAY_TASK_STEP", "2"}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 2);
  EXPECT_EQ(s->world, 4);
  s = shard_with({{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_COUNT", "5"}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 4);
  EXPECT_EQ(s->world, 5);
  s = shard_with({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->world, 2);
  // torchrun inside a Slurm allocation: torchrun's variables win.
  s = shard_with({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rank, 1);
}

TEST(ShardEnvironment, BrokenLaunchesAreOneClearError) {
  const auto message = [](const std::map<std::string, std::string>& env) {
    try {
      shard_with(env);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "1"}}).find("RANK is set but WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(message({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).find("rank 4 of world size 4"), std::string::npos);
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "4"}}).find("RANK='x' is not an integer"), std::string::npos);
  EXPECT_NE(message({{"SLURM_ARRAY_TASK_ID", "1"}}).find("neither SLURM_ARRAY_TASK_COUNT"), std::string::npos);
  EXPECT_NE(message({{"SLURM_ARRAY_TASK_ID", "4"},
                     {"SLURM_ARRAY_TASK_MIN", "3"},
                     {"SLURM_ARRAY_TASK_MAX", "9"},
                     {"SLURM_ARRAY_TASK_STEP", "2"}})
                .find("not MIN=3 plus a multiple of STEP=2"),
            std::string::npos);
  EXPECT_THROW(bench::parse_shard("3/3"), Error);
  EXPECT_THROW(bench::parse_shard("1"), Error);
  EXPECT_EQ(bench::parse_shard("1/3").world, 3);
}

// --- Sharded sweeps in real processes, merged ----------------------------------------------------------

namespace fs = std::filesystem;

const std::vector<std::string> kSweep = {"bench",    "-b",         "cpu-flash,cpu-vanilla,cpu-ring",
                                         "--seq",    "48,70",      "--heads",
                                         "2",        "--kv-heads", "1",
                                         "--batch",  "1",          "--head-dim",
                                         "32",       "--dtype",    "fp32,bf16",
                                         "--causal", "both",       "--min-reps",
                                         "2",        "--max-reps", "2",
                                         "--warmup", "0",          "--max-time-ms",
                                         "20",       "-q"};

std::vector<std::string> sweep_into(const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = kSweep;
  args.push_back("--out");
  args.push_back(out.string());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Runs the sweep as `world` processes at once, each with RANK/WORLD_SIZE as torchrun sets them
// (run_cli's scratch folder is per test process, so the processes are started here, one shell each).
void run_sharded(const fs::path& out, int world) {
  const fs::path logs = out.parent_path() / ("logs-" + out.filename().string());
  fs::create_directories(logs);
  std::string command;
  for (int r = 0; r < world; ++r) {
    command += "env RANK=" + std::to_string(r) + " WORLD_SIZE=" + std::to_string(world) +
               " LOCAL_RANK=" + std::to_string(r) + " '" + ATTNSUITE_CLI_PATH + "'";
    for (const auto& a : sweep_into(out)) command += " '" + a + "'";
    command += " >'" + (logs / std::to_string(r)).string() + "' 2>&1 || echo " + std::to_string(r) + " >>'" +
               (logs / "failed").string() + "' &\n";
  }
  command += "wait\n";
  ASSERT_EQ(std::system(command.c_str()), 0);
  ASSERT_FALSE(fs::exists(logs / "failed"))
      << "a rank failed: " << testing_support::slurp(logs / "failed") << " " << testing_support::slurp(logs / "0");
}

// The columns that do not depend on timing: what ran, where, and how accurate it was.
const std::vector<std::string> kContentColumns = {
    "backend",     "display_name", "peer_of",           "device",   "gpu",           "dtype",    "layout",
    "batch",       "heads_q",      "heads_kv",          "seq_q",    "seq_kv",        "head_dim", "causal",
    "window_left", "window_right", "generator",         "seed",     "max_abs_err",   "rel_l2",   "rel_l1",
    "cos_sim",     "rmse",         "accuracy_fraction", "sparsity", "kernel_config", "status"};

TEST(ShardedSweep, ThreeProcessesMergedEqualOneRun) {
  const fs::path dir = scratch("sharded");
  const auto single = run_cli(sweep_into(dir / "single"));
  ASSERT_EQ(single.code, 0) << single.err;
  run_sharded(dir / "sharded", 3);
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(fs::exists(dir / "sharded" / ("shard-" + std::to_string(r) + "-of-3") / "shard.json"));
  const auto merged = run_cli({"merge", (dir / "sharded").string(), "--out", (dir / "merged").string(), "-q"});
  ASSERT_EQ(merged.code, 0) << merged.err;
  EXPECT_NE(merged.out.find("merged 3 shards: 24 cases"), std::string::npos) << merged.out;

  std::vector<std::string> warnings;
  const auto a = report::read_jsonl(dir / "single" / bench::kRowsFile, &warnings);
  bench::RunHeader header;
  const auto b = report::read_jsonl(dir / "merged" / bench::kRowsFile, &warnings, &header);
  ASSERT_EQ(a.size(), 24u);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto ja = bench::to_json(a[i]), jb = bench::to_json(b[i]);
    for (const auto& column : kContentColumns) EXPECT_EQ(ja[column], jb[column]) << "row " << i << " column " << column;
  }
  EXPECT_EQ(header.settings["shards"], 3);
  for (const char* file : {bench::kCsvFile, bench::kJsonFile, bench::kMarkdownFile, bench::kSuiteFile})
    EXPECT_TRUE(fs::exists(dir / "merged" / file)) << file;
  // The merged files read back like any result.
  const auto report = run_cli({"report", (dir / "merged" / bench::kJsonFile).string()});
  EXPECT_EQ(report.code, 0) << report.err;
  fs::remove_all(dir);
}

// Drops the last `count` rows of a shard's JSONL, as an interrupted run leaves it.
void drop_rows(const fs::path& jsonl, int count) {
  std::string text = testing_support::slurp(jsonl);
  for (int i = 0; i < count; ++i) text.erase(text.rfind('\n', text.size() - 2) + 1);
  std::ofstream(jsonl, std::ios::trunc) << text;
}

TEST(ShardedSweep, MergeRefusesMissingDuplicateAndMixedShardsAndResumeCompletesAShard) {
  const fs::path dir = scratch("refusals");
  run_sharded(dir / "s", 2);
  const fs::path shard0 = dir / "s" / "shard-0-of-2", shard1 = dir / "s" / "shard-1-of-2";
  const auto merge = [&](std::vector<std::string> shards) {
    std::vector<std::string> args{"merge"};
    args.insert(args.end(), shards.begin(), shards.end());
    args.insert(args.end(), {"--out", (dir / "m").string(), "--force", "-q"});
    return run_cli(args);
  };
  const auto one_line_error = [](const testing_support::CliResult& r, const std::string& what) {
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(testing_support::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  };

  // A missing rank.
  one_line_error(merge({shard0.string()}), "shard 1 of 2 is missing");
  // A missing case: shard 1 interrupted before its last two cases.
  const std::string complete = testing_support::slurp(shard1 / bench::kRowsFile);
  drop_rows(shard1 / bench::kRowsFile, 2);
  one_line_error(merge({(dir / "s").string()}), "2 of 24 cases are missing");
  // --resume on that shard runs just those two cases; then the merge succeeds.
  const auto resumed = run_cli(sweep_into(dir / "s", {"--resume"}), {"RANK=1", "WORLD_SIZE=2"});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("(10 resumed)"), std::string::npos) << resumed.out;
  EXPECT_EQ(merge({(dir / "s").string()}).code, 0);
  // A duplicate: a row of shard 0 copied into shard 1.
  {
    const std::string rows0 = testing_support::slurp(shard0 / bench::kRowsFile);
    const std::size_t second_line = rows0.find('\n') + 1;  // after the header line
    std::ofstream(shard1 / bench::kRowsFile, std::ios::app)
        << rows0.substr(second_line, rows0.find('\n', second_line) - second_line + 1);
    one_line_error(merge({(dir / "s").string()}), "appears more than once");
    std::ofstream(shard1 / bench::kRowsFile, std::ios::trunc) << complete;
  }
  // Mixed plans: shard 1 of another sweep (other sequence lengths).
  {
    std::vector<std::string> other = sweep_into(dir / "other");
    other[4] = "48,80";
    ASSERT_EQ(run_cli(other, {"RANK=1", "WORLD_SIZE=2"}).code, 0);
    one_line_error(merge({shard0.string(), (dir / "other" / "shard-1-of-2").string()}), "come from different plans");
  }
  // The same shard twice.
  one_line_error(merge({shard0.string(), shard0.string()}), "are both shard 0 of 2");
  // Not a shard at all.
  one_line_error(merge({dir.string() + "/nothing-here"}), "is not a directory");
  fs::remove_all(dir);
}

TEST(ShardedSweep, ShardedRunNeedsOutAndGpusNeedsAGpu) {
  const auto no_out = run_cli({"bench", "-b", "cpu-flash", "--seq", "32", "-q"}, {"RANK=0", "WORLD_SIZE=2"});
  EXPECT_EQ(no_out.code, 2);
  EXPECT_NE(no_out.err.find("needs --out DIR"), std::string::npos) << no_out.err;
  const auto bad_shard = run_cli({"bench", "-b", "cpu-flash", "--shard", "2/2", "--out", "/tmp/x", "-q"});
  EXPECT_EQ(bad_shard.code, 2);
  EXPECT_NE(bad_shard.err.find("0 <= RANK < WORLD"), std::string::npos) << bad_shard.err;
#if ATTNSUITE_HAVE_CUDA
  if (!testing_support::cuda_device_missing().empty()) {
#else
  {
#endif
    const fs::path dir = scratch("nogpu");
    const auto r = run_cli({"bench", "-b", "cpu-flash", "--seq", "32", "--gpus", "all", "--out", dir.string(), "-q"});
    EXPECT_EQ(r.code, 2);  // a usage error: the value and what is allowed
    EXPECT_FALSE(fs::exists(dir / "results.json"));
    EXPECT_EQ(testing_support::count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("--gpus all: "), std::string::npos) << r.err;
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace attnsuite
