// Block-sparse attention (issue 6): the predictor's rule, the CPU block-skipping forward against
// an fp64 reference of the masked attention, the tuner on held-out inputs, structured and
// captured inputs, the CLI's errors; and on a GPU, the predictor and kernel against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "attnsuite/device_context.hpp"
#include "bench/captured_inputs.hpp"
#include "bench/generators.hpp"
#include "bench/runner.hpp"
#include "cli_test_support.hpp"
#include "sparse/sparse.hpp"
#include "tune/sparse_tuner.hpp"

#if ATTNSUITE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/common/device_buffer.hpp"
#include "cuda/sparge/launch.hpp"
#include "gpu_test_support.hpp"
#endif

namespace attnsuite {
namespace {

namespace fs = std::filesystem;

// Host inputs of a problem in its dtype (dense BSHD), from a generator.
struct Host {
  AttentionProblem p;
  std::vector<unsigned char> q, k, v, o;
  std::vector<float> lse;
  AttentionArgs args;
};

TensorView view_of(std::vector<unsigned char>& bytes, DType dtype, int batch, int seq, int heads, int dim) {
  TensorView t;
  t.data = bytes.data();
  t.dtype = dtype;
  t.shape = {batch, seq, heads, dim};
  t.strides = TensorView::dense_strides(t.shape, Layout::BSHD);
  return t;
}

Host make_host(const AttentionProblem& p, const std::string& generator, std::uint64_t seed) {
  Host h;
  h.p = p;
  const std::size_t nq = static_cast<std::size_t>(p.batch) * p.seq_q * p.heads_q * p.head_dim;
  const std::size_t nk = static_cast<std::size_t>(p.batch) * p.seq_kv * p.heads_kv * p.head_dim;
  std::vector<float> q(nq), k(nk), v(nk);
  bench::find_generator(generator).fill(p, seed, q, k, v);
  const std::size_t e = size_of(p.dtype);
  h.q.resize(nq * e);
  h.k.resize(nk * e);
  h.v.resize(nk * e);
  h.o.assign(nq * e, 0);
  h.lse.assign(static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q, 0.0f);
  convert_from_float(q.data(), h.q.data(), p.dtype, nq);
  convert_from_float(k.data(), h.k.data(), p.dtype, nk);
  convert_from_float(v.data(), h.v.data(), p.dtype, nk);
  h.args.q = view_of(h.q, p.dtype, p.batch, p.seq_q, p.heads_q, p.head_dim);
  h.args.k = view_of(h.k, p.dtype, p.batch, p.seq_kv, p.heads_kv, p.head_dim);
  h.args.v = view_of(h.v, p.dtype, p.batch, p.seq_kv, p.heads_kv, p.head_dim);
  h.args.o = view_of(h.o, p.dtype, p.batch, p.seq_q, p.heads_q, p.head_dim);
  h.args.lse = {h.lse.data(), {}};
  return h;
}

AttentionProblem problem(int batch, int hq, int hkv, int seq_q, int seq_kv, int d, DType dtype, bool causal) {
  AttentionProblem p;
  p.batch = batch;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.head_dim = d;
  p.dtype = dtype;
  p.causal = causal;
  return p;
}

// fp64 attention over the kept blocks only: a row sees key j when the mask keeps j's block for
// the row's q block and the causal/window mask allows j.
std::vector<double> masked_reference(const Host& h, sparse::BlockShape shape, const sparse::BlockMask& mask) {
  const AttentionProblem& p = h.p;
  const int d = p.head_dim;
  std::vector<double> out(static_cast<std::size_t>(p.batch) * p.seq_q * p.heads_q * d, 0.0);
  const double scale = p.softmax_scale();
  for (int b = 0; b < p.batch; ++b)
    for (int hh = 0; hh < p.heads_q; ++hh) {
      const int kvh = p.kv_head_of(hh);
      for (int i = 0; i < p.seq_q; ++i) {
        const int mb = i / shape.m;
        const std::size_t slot = mask.slot(b, hh, mb);
        std::vector<char> kept(static_cast<std::size_t>(mask.n_blocks), 0);
        for (int c = 0; c < mask.count[slot]; ++c)
          kept[static_cast<std::size_t>(mask.index[slot * mask.n_blocks + c])] = 1;
        std::vector<double> s;
        std::vector<int> keys;
        double mx = -INFINITY;
        for (std::int64_t j = p.key_begin(i); j < p.key_end(i); ++j) {
          if (!kept[static_cast<std::size_t>(j / shape.n)]) continue;
          double dot = 0;
          for (int x = 0; x < d; ++x)
            dot += static_cast<double>(load_as_float(h.q.data(), p.dtype, h.args.q.offset(b, i, hh, x))) *
                   load_as_float(h.k.data(), p.dtype, h.args.k.offset(b, j, kvh, x));
          s.push_back(dot * scale);
          keys.push_back(static_cast<int>(j));
          mx = std::max(mx, dot * scale);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (std::size_t n = 0; n < keys.size(); ++n)
          for (int x = 0; x < d; ++x)
            out[static_cast<std::size_t>(h.args.o.offset(b, i, hh, x))] +=
                s[n] / sum * load_as_float(h.v.data(), p.dtype, h.args.v.offset(b, keys[n], kvh, x));
      }
    }
  return out;
}

// NaN anywhere (a poisoned output never written, or a NaN computed) is an infinite error.
double max_abs_error(const Host& h, const std::vector<double>& want) {
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double diff = std::abs(load_as_float(h.o.data(), h.p.dtype, static_cast<std::int64_t>(i)) - want[i]);
    if (!std::isfinite(diff)) return INFINITY;
    worst = std::max(worst, diff);
  }
  return worst;
}

TEST(SparsePredictor, LargerCdfKeepsASupersetAndCdfOneIsDense) {
  for (bool causal : {false, true}) {
    const AttentionProblem p = problem(1, 4, 2, 1000, 1000, 64, DType::F32, causal);
    const Host h = make_host(p, "banded", 3);
    const sparse::BlockShape shape = sparse::block_shape_for(64);
    sparse::SparseConfig low, high, full;
    low.heads[0].cdf_threshold = 0.5;
    high.heads[0].cdf_threshold = 0.9;
    full.heads[0].cdf_threshold = 1.0;
    const auto a = sparse::predict_blocks(p, h.args, shape, low);
    const auto b = sparse::predict_blocks(p, h.args, shape, high);
    const auto c = sparse::predict_blocks(p, h.args, shape, full);
    const auto dense = sparse::dense_mask(p, shape);
    EXPECT_EQ(c.count, dense.count);
    EXPECT_EQ(c.index, dense.index);
    EXPECT_LT(a.kept_blocks(), dense.kept_blocks());
    for (std::size_t slot = 0; slot < a.count.size(); ++slot) {
      std::vector<int> in_b(b.index.begin() + static_cast<std::ptrdiff_t>(slot * b.n_blocks),
                            b.index.begin() + static_cast<std::ptrdiff_t>(slot * b.n_blocks + b.count[slot]));
      for (int n = 0; n < a.count[slot]; ++n)
        EXPECT_TRUE(std::binary_search(in_b.begin(), in_b.end(), a.index[slot * a.n_blocks + n]))
            << "slot " << slot << (causal ? " causal" : "");
      // The diagonal (blocks the causal mask cuts) and the sink are always kept.
      if (a.count[slot] > 0 && p.causal) {
        const auto [lo, hi] = sparse::visible_blocks(p, shape, static_cast<int>(slot % a.m_blocks));
        EXPECT_EQ(a.index[slot * a.n_blocks + a.count[slot] - 1], hi - 1);
        EXPECT_EQ(a.index[slot * a.n_blocks], lo);
      }
    }
  }
}

TEST(SparseCpu, GivenMaskMatchesTheMaskedFp64Reference) {
  for (bool causal : {false, true}) {
    const AttentionProblem p = problem(2, 4, 2, 300, 333, 64, DType::F32, causal);
    Host h = make_host(p, "randn", 5);
    const sparse::BlockShape shape = sparse::block_shape_for(64);
    const sparse::BlockMask mask = sparse::make_block_mask("random:0.4", p, shape, 9);
    sparse::SparseStats stats;
    sparse::sparse_forward(p, h.args, shape, mask, sparse::SparseConfig{}, &stats);
    EXPECT_LT(max_abs_error(h, masked_reference(h, shape, mask)), 2e-5);
    EXPECT_GT(stats.predicted_sparsity(), 0.2);
    EXPECT_EQ(stats.pv_skipped_groups, 0);  // λ = infinity: never
  }
}

TEST(SparseCpu, SparsityZeroReproducesDenseAttention) {
  const AttentionProblem p = problem(1, 4, 4, 257, 257, 128, DType::F32, true);
  Host h = make_host(p, "randn", 11);
  const sparse::BlockShape shape = sparse::block_shape_for(128);
  sparse::SparseConfig dense;
  dense.heads[0].dense = true;
  sparse::SparseStats stats;
  sparse::sparse_forward(p, h.args, shape, sparse::predict_blocks(p, h.args, shape, dense), dense, &stats);
  EXPECT_EQ(stats.predicted_sparsity(), 0.0);
  EXPECT_LT(max_abs_error(h, masked_reference(h, shape, sparse::dense_mask(p, shape))), 2e-5);
}

TEST(SparseMasks, CoarsenKeepsATileWhereAnyOfItsBlocksIsKept) {
  const AttentionProblem p = problem(2, 3, 3, 300, 1000, 128, DType::BF16, true);
  const sparse::BlockShape shape = sparse::block_shape_for(128);
  const sparse::BlockMask mask = sparse::make_block_mask("random:0.2", p, shape, 5);
  for (const int factor : {1, 3, 4}) {
    const sparse::BlockMask tiles = sparse::coarsen_mask(mask, factor);
    ASSERT_EQ(tiles.n_blocks, (mask.n_blocks + factor - 1) / factor);
    ASSERT_EQ(tiles.m_blocks, mask.m_blocks);
    for (std::size_t slot = 0; slot < mask.count.size(); ++slot) {
      std::vector<int> want;
      for (int c = 0; c < mask.count[slot]; ++c) {
        const int tile =
            mask.index[slot * static_cast<std::size_t>(mask.n_blocks) + static_cast<std::size_t>(c)] / factor;
        if (want.empty() || want.back() != tile) want.push_back(tile);
      }
      const std::vector<int> got(
          tiles.index.begin() + static_cast<std::ptrdiff_t>(slot * static_cast<std::size_t>(tiles.n_blocks)),
          tiles.index.begin() + static_cast<std::ptrdiff_t>(slot * static_cast<std::size_t>(tiles.n_blocks)) +
              tiles.count[slot]);
      EXPECT_EQ(got, want) << "slot " << slot << " factor " << factor;
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
    }
  }
  EXPECT_EQ(sparse::coarsen_mask(mask, 1).count, mask.count);
  EXPECT_THROW(sparse::coarsen_mask(mask, 0), Error);
}

TEST(SparseCpu, PvSkipSkipsOnlyNegligibleBlocks) {
  const AttentionProblem p = problem(1, 2, 2, 1024, 1024, 64, DType::F32, true);
  Host h = make_host(p, "banded", 1);
  const sparse::BlockShape shape = sparse::block_shape_for(64);
  sparse::SparseConfig config;
  config.heads[0].pv_threshold = 6.0;
  const auto mask = sparse::dense_mask(p, shape);
  sparse::SparseStats stats;
  sparse::sparse_forward(p, h.args, shape, mask, config, &stats);
  EXPECT_GT(stats.pv_skipped_groups, 0);
  EXPECT_GT(stats.achieved_sparsity(), stats.predicted_sparsity());
  // Skipped P are below e^-6 of their row's max: the output moves little.
  const auto want = masked_reference(h, shape, mask);
  double diff = 0, ref = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff += std::abs(load_as_float(h.o.data(), p.dtype, static_cast<std::int64_t>(i)) - want[i]);
    ref += std::abs(want[i]);
  }
  EXPECT_LT(diff / ref, 0.02);
}

TEST(SparseGenerators, StructuredInputsAreSparseAndRandnIsNot) {
  const AttentionProblem p = problem(1, 2, 2, 2048, 2048, 64, DType::F32, false);
  const sparse::BlockShape shape = sparse::block_shape_for(64);
  auto sparsity = [&](const std::string& generator) {
    const Host h = make_host(p, generator, 7);
    const auto mask = sparse::predict_blocks(p, h.args, shape, sparse::SparseConfig{});
    return 1.0 - static_cast<double>(mask.kept_blocks()) / static_cast<double>(sparse::visible_block_count(p, shape));
  };
  EXPECT_GT(sparsity("banded"), 0.4);
  EXPECT_GT(sparsity("clustered"), 0.4);
  EXPECT_GT(sparsity("sinks"), 0.4);
  // Gaussian blocks are not self-similar (mean pairwise cosine ≈ 1/64): all computed.
  EXPECT_LT(sparsity("randn"), 0.05);
}

void write_npy(const fs::path& path, const std::string& descr, const std::vector<std::int64_t>& shape, const void* data,
               std::size_t bytes) {
  std::string dims;
  for (std::int64_t s : shape) dims += std::to_string(s) + ", ";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const unsigned short len = static_cast<unsigned short>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

TEST(SparseInputs, LoadsNpyAndSafetensorsAndRejectsBadFiles) {
  const fs::path dir = testing_support::scratch("captured");
  fs::create_directories(dir);
  const AttentionProblem p = problem(1, 2, 2, 16, 16, 64, DType::BF16, false);
  std::vector<float> values(16 * 2 * 64);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97) * 0.25f - 3.0f;
  for (const char* name : {"q", "k", "v"})
    write_npy(dir / (std::string(name) + ".npy"), "<f4", {1, 16, 2, 64}, values.data(), values.size() * 4);
  std::vector<float> q(values.size()), k(values.size()), v(values.size());
  bench::find_generator("npy:" + dir.string()).fill(p, 0, q, k, v);
  EXPECT_EQ(q, values);
  EXPECT_EQ(v, values);

  // safetensors, bf16, (seq, heads, dim) for batch 1.
  std::vector<std::uint16_t> bf(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bf[i] = float_to_bf16_bits(values[i]);
  nlohmann::json header;
  const std::size_t bytes = bf.size() * 2;
  header["q"] = {{"dtype", "BF16"}, {"shape", {16, 2, 64}}, {"data_offsets", {0, bytes}}};
  header["k"] = {{"dtype", "BF16"}, {"shape", {16, 2, 64}}, {"data_offsets", {bytes, 2 * bytes}}};
  header["v"] = {{"dtype", "BF16"}, {"shape", {16, 2, 64}}, {"data_offsets", {2 * bytes, 3 * bytes}}};
  const std::string text = header.dump();
  {
    std::ofstream out(dir / "qkv.safetensors", std::ios::binary);
    const std::uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << text;
    for (int t = 0; t < 3; ++t)
      out.write(reinterpret_cast<const char*>(bf.data()), static_cast<std::streamsize>(bytes));
  }
  bench::find_generator("safetensors:" + (dir / "qkv.safetensors").string()).fill(p, 0, q, k, v);
  EXPECT_EQ(k, values);  // the values are exact in bf16

  // Wrong dtype, wrong shape, missing file: Error(Usage) naming the problem.
  const fs::path bad = dir / "bad";
  fs::create_directories(bad);
  std::vector<std::int32_t> ints(values.size());
  for (const char* name : {"q", "k", "v"})
    write_npy(bad / (std::string(name) + ".npy"), "<i4", {1, 16, 2, 64}, ints.data(), ints.size() * 4);
  try {
    bench::find_generator("npy:" + bad.string());
    ADD_FAILURE() << "int32 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("dtype '<i4' not supported"), std::string::npos) << e.what();
  }
  const AttentionProblem other = problem(1, 2, 2, 32, 32, 64, DType::BF16, false);
  std::vector<float> q2(32 * 2 * 64), k2(q2.size()), v2(q2.size());
  try {
    bench::find_generator("npy:" + dir.string()).fill(other, 0, q2, k2, v2);
    ADD_FAILURE() << "shape mismatch accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bench::find_generator("safetensors:" + (dir / "missing.safetensors").string()), Error);
  fs::remove_all(dir);
}

TEST(SparseTuner, MeetsItsTargetOnHeldOutInputs) {
  const AttentionProblem p = problem(1, 2, 2, 2048, 2048, 64, DType::BF16, true);
  tune::SparseTarget target;  // rel L1 0.05
  tune::BackendLayerEvaluator calibrate(p, "cpu-sparge", "cpu-flash", {"banded", "sinks"}, 0, 2);
  const tune::SparseTuneResult result = tune::tune_sparse_layer(std::ref(calibrate), p.heads_q, target);
  ASSERT_EQ(result.config.heads.size(), 2u);
  tune::BackendLayerEvaluator held_out(p, "cpu-sparge", "cpu-flash", {"banded", "sinks"}, 100, 1);
  const auto outcome = held_out(result.config);
  double sparsity = 0;
  for (const auto& head : outcome) {
    EXPECT_LE(head.rel_l1, target.value);
    sparsity += head.predicted_sparsity / static_cast<double>(outcome.size());
  }
  EXPECT_GT(sparsity, 0.2);  // causal N = 2048: a band of ~512 keys leaves ~0.6 at most
  // Bisection, not a grid: 3 similarity thresholds × 7 steps + λ candidates + the final check.
  EXPECT_LE(result.evaluations, 3 * 7 + 4 + 1);
}

TEST(SparseBench, RowsCarrySparsityAndPredictorTime) {
  bench::SweepSpec spec;
  spec.backends = {"cpu-sparge", "cpu-block-sparse"};
  spec.dtypes = {DType::BF16};
  spec.seq_q = {1024};
  spec.heads = {bench::HeadConfig{2, 2, 64, ""}};
  spec.generators = {"banded"};
  spec.timing.measure.min_reps = 1;
  spec.timing.measure.max_reps = 2;
  spec.timing.measure.warmup_reps = 0;
  spec.backend_options["block_mask"] = "band:4";
  bench::Runner runner(spec, Registry::global());
  for (const bench::Case& c : bench::expand(spec)) {
    const auto row = runner.run(c);
    ASSERT_TRUE(row);
    ASSERT_EQ(row->status, bench::CaseStatus::Ok) << row->reason;
    ASSERT_TRUE(row->sparsity && row->predicted_sparsity && row->effective_tflops);
    EXPECT_GT(*row->predicted_sparsity, 0.3) << c.backend;
    EXPECT_LT(*row->effective_tflops, *row->tflops);
    EXPECT_EQ(row->predictor_ms.has_value(), c.backend == "cpu-sparge");
    if (c.backend == "cpu-sparge") {
      EXPECT_LT(*row->rel_l1, 0.05);
    }
  }
  bench::SweepSpec bad = spec;
  bad.backend_options = {{"block_mask", "band:0"}};
  EXPECT_THROW(bench::Runner(bad, Registry::global()), Error);
  bad.backend_options = {{"no_such_option", "1"}};
  EXPECT_THROW(bench::Runner(bad, Registry::global()), Error);
}

TEST(SparseCli, BadInputIsOneClearLineAndExitTwo) {
  using testing_support::run_cli;
  const std::vector<std::vector<std::string>> cases = {
      {"tune", "--sparse", "-b", "cpu-sparge", "--target", "2", "--seq", "256", "--heads", "1", "--head-dim", "64"},
      {"tune", "--sparse", "-b", "cpu-sparge", "--margin", "0", "--seq", "256", "--heads", "1", "--head-dim", "64"},
      {"tune", "--sparse", "-b", "cpu-flash", "--seq", "256", "--heads", "1", "--head-dim", "64"},
      {"bench", "-b", "cpu-sparge", "--sparse-config", "/nonexistent/sparse.json", "--seq", "256"},
      {"bench", "-b", "cpu-block-sparse", "--block-mask", "band:x", "--seq", "256"},
      {"bench", "-b", "cpu-flash", "--generator", "npy:/nonexistent", "--seq", "256"},
  };
  for (const auto& args : cases) {
    const testing_support::CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args[0] << " " << args[3] << ": " << r.err;
    EXPECT_EQ(testing_support::count_lines(r.err), 1) << r.err;
  }
  // A config with a threshold out of range.
  const fs::path dir = testing_support::scratch("sparse_cfg");
  fs::create_directories(dir);
  std::ofstream(dir / "bad.json") << R"({"layers": [{"heads": [{"cdf_threshold": 1.5}]}]})";
  const auto r = run_cli({"bench", "-b", "cpu-sparge", "--sparse-config", (dir / "bad.json").string(), "--seq", "256"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("cdf_threshold 1.5 out of range"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

#if ATTNSUITE_HAVE_CUDA

// Device copies of a host problem's inputs.
struct DeviceInputs {
  cuda::DeviceBuffer q, k, v, o, workspace;
  AttentionArgs args;
  DeviceInputs(Host& h, std::size_t workspace_bytes)
      : q(h.q.size()),
        k(h.k.size()),
        v(h.v.size()),
        o(h.o.size()),
        workspace(std::max<std::size_t>(workspace_bytes, 256)) {
    cudaMemcpy(q.data(), h.q.data(), h.q.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(k.data(), h.k.data(), h.k.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(v.data(), h.v.data(), h.v.size(), cudaMemcpyHostToDevice);
    args = h.args;
    args.q.data = q.data();
    args.k.data = k.data();
    args.v.data = v.data();
    args.o.data = o.data();
    args.lse = {};
    for (TensorView* t : {&args.q, &args.k, &args.v, &args.o}) t->device = {DeviceType::Cuda, 0};
    args.workspace = workspace.data();
  }
  std::vector<unsigned char> output() const {
    std::vector<unsigned char> host(o.bytes());
    cudaMemcpy(host.data(), o.data(), host.size(), cudaMemcpyDeviceToHost);
    return host;
  }
};

// The Hopper kernels' tiles (flash3, sage2's wgmma kernel), and a mask in them.
constexpr sparse::BlockShape kTiles{cuda::sparge::kHopperTiles.m, cuda::sparge::kHopperTiles.n,
                                    cuda::sparge::kHopperTiles.rows_per_warp};
sparse::BlockMask in_tiles(const sparse::BlockMask& mask, int head_dim) {
  return sparse::coarsen_mask(mask, kTiles.n / sparse::block_shape_for(head_dim).n);
}

// Relative L1 of `got` against `want` (both host outputs in the problem's dtype); NaN: infinity.
double relative_l1(const AttentionProblem& p, const std::vector<unsigned char>& got,
                   const std::vector<unsigned char>& want) {
  double diff = 0, norm = 0;
  const std::size_t n = got.size() / size_of(p.dtype);
  for (std::size_t i = 0; i < n; ++i) {
    const double a = load_as_float(got.data(), p.dtype, static_cast<std::int64_t>(i));
    const double b = load_as_float(want.data(), p.dtype, static_cast<std::int64_t>(i));
    if (!std::isfinite(a - b)) return INFINITY;
    diff += std::abs(a - b);
    norm += std::abs(b);
  }
  return diff / norm;
}

// PlanOptions with kernel config `config` ("": the backend's choice) and backend option `key` =
// `value` (none when `key` is empty).
PlanOptions plan_options(const std::string& config, const std::string& key = "", const std::string& value = "") {
  PlanOptions options;
  options.kernel_config = config;
  if (!key.empty()) options.options[key] = value;
  return options;
}

TEST(SparseGpu, PredictorMatchesTheCpuRule) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& sparge = Registry::global().find("sparge");
  for (bool causal : {false, true})
    for (int d : {64, 128}) {
      const AttentionProblem p = problem(2, 8, 4, 4096, 4096, d, DType::BF16, causal);
      Host h = make_host(p, "sinks", 21);
      // Every kernel the backend can run here (flash3's 128 × 128 tiles and flash2's on sm_90):
      // the predictor's blocks are flash2's either way.
      for (const std::string& config : sparge.kernel_configs(p)) {
        const sparse::BlockShape shape = sparse::block_shape_for(d);
        sparse::SparseConfig settings;
        settings.heads[0].cdf_threshold = 0.8;
        const sparse::BlockMask want = sparse::predict_blocks(p, h.args, shape, settings);
        const std::unique_ptr<KernelPlan> plan =
            sparge.plan(p, plan_options(config, "sparse_config_json", sparse::to_json(settings.heads[0]).dump()));
        DeviceInputs in(h, plan->workspace_bytes());
        const RunReport run = plan->forward(in.args, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(run.kernel_config, config);
        const std::optional<RunReport::Sparse>& report = run.sparse_stats();
        ASSERT_TRUE(report && report->predictor_ms);
        const double cpu_sparsity =
            1.0 - static_cast<double>(want.kept_blocks()) / static_cast<double>(sparse::visible_block_count(p, shape));
        // Pooling in fp32 on the GPU and fp64 here can move a block that sits exactly at the
        // cdf boundary: the predicted sparsity agrees to 0.5% of the blocks.
        EXPECT_NEAR(report->predicted_sparsity, cpu_sparsity, 0.005)
            << config << " d" << d << (causal ? " causal" : "");
        EXPECT_GT(report->predicted_sparsity, 0.3) << config;
        if (config == "flash3") {
          // The kernel's work: the same blocks coarsened to its tiles (1% of the tiles, 2-4×
          // fewer than blocks).
          const double cpu_tiles = 1.0 - static_cast<double>(in_tiles(want, d).kept_blocks()) /
                                             static_cast<double>(sparse::visible_block_count(p, kTiles));
          EXPECT_NEAR(report->achieved_sparsity, cpu_tiles, 0.01) << "d" << d << (causal ? " causal" : "");
          EXPECT_LT(report->achieved_sparsity, report->predicted_sparsity + 1e-12);
        }
      }
    }
}

// Outputs are poisoned (all bits set: NaN in fp16 and bf16) before each forward.
TEST(SparseGpu, GivenMaskMatchesTheMaskedReferenceAndDenseMaskIsTheDenseKernel) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& block_sparse = Registry::global().find("block-sparse");
  const Backend& sparge = Registry::global().find("sparge");
  struct Shape {
    int hq, hkv, seq_q, seq_kv, d;
  };
  for (const Shape& sh : {Shape{4, 2, 1000, 1000, 128}, Shape{4, 1, 333, 1000, 64}, Shape{2, 2, 7, 129, 128}})
    for (bool causal : {false, true}) {
      const AttentionProblem p = problem(1, sh.hq, sh.hkv, sh.seq_q, sh.seq_kv, sh.d, DType::BF16, causal);
      Host h = make_host(p, "randn", 4);
      for (const std::string& config : block_sparse.kernel_configs(p)) {
        SCOPED_TRACE(config + " " + p.describe());
        const sparse::BlockShape shape = sparse::block_shape_for(p.head_dim);
        const std::unique_ptr<KernelPlan> masked =
            block_sparse.plan(p, plan_options(config, "block_mask", "random:0.3"));
        EXPECT_EQ(masked->workspace_bytes(), 0u);
        DeviceInputs in(h, 0);
        cudaMemset(in.o.data(), 0xFF, in.o.bytes());
        const RunReport masked_run = masked->forward(in.args, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(masked_run.kernel_config, config);
        ASSERT_TRUE(masked_run.sparse_stats());
        const std::vector<unsigned char> got = in.output();
        std::memcpy(h.o.data(), got.data(), got.size());
        // flash3 visits whole 128-key tiles: the keys of every tile with a kept block.
        const sparse::BlockMask mask = sparse::make_block_mask("random:0.3", p, shape);
        const auto want = config == "flash3" ? masked_reference(h, kTiles, in_tiles(mask, p.head_dim))
                                             : masked_reference(h, shape, mask);
        EXPECT_LT(max_abs_error(h, want), 2e-2);  // bf16 output, P rounded to bf16

        // Sparsity 0: every block kept, λ = infinity: bitwise the dense kernel's output (flash3's
        // 128-row config, or flash2).
        sparse::HeadSettings dense;
        dense.dense = true;
        const std::unique_ptr<KernelPlan> all =
            sparge.plan(p, plan_options(config, "sparse_config_json", sparse::to_json(dense).dump()));
        DeviceInputs in2(h, all->workspace_bytes());
        cudaMemset(in2.o.data(), 0xFF, in2.o.bytes());
        const RunReport all_run = all->forward(in2.args, nullptr);
        const Backend& kernel = Registry::global().find(config);
        cudaMemset(in.o.data(), 0xFF, in.o.bytes());
        kernel.forward(p, in.args, nullptr, plan_options(config == "flash3" ? "default" : ""));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(in2.output(), in.output());
        ASSERT_TRUE(all_run.sparse_stats());
        EXPECT_EQ(all_run.sparse_stats()->predicted_sparsity, 0.0);
      }
    }
}

// sparge-sage runs the same predictor on the same 128 × 128 blocks as sparge's flash3 kernel,
// then sage2's quantized kernel over the kept blocks: the same predicted sparsity, and the
// output within sage2's accuracy of sparge's. At sparsity 0 it is sage2 (wgmma) bitwise.
TEST(SparseGpu, SpargeSageKeepsSpargesBlocksWithinSage2sAccuracy) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Backend& sparge_sage = Registry::global().find("sparge-sage");
  const Backend& sparge = Registry::global().find("sparge");
  const AttentionProblem probe = problem(1, 8, 4, 2048, 2048, 128, DType::BF16, false);
  if (!sparge_sage.supports(probe)) GTEST_SKIP() << sparge_sage.supports(probe).reason;
  struct Shape {
    int hq, hkv, seq_q, seq_kv, d;
  };
  for (const Shape& sh : {Shape{2, 1, 4096, 4096, 128}, Shape{2, 2, 1000, 3000, 64}})
    for (bool causal : {false, true}) {
      const AttentionProblem p = problem(1, sh.hq, sh.hkv, sh.seq_q, sh.seq_kv, sh.d, DType::BF16, causal);
      SCOPED_TRACE(p.describe());
      Host h = make_host(p, "banded", 9);
      sparse::HeadSettings settings;
      settings.cdf_threshold = 0.95;
      const std::string json = sparse::to_json(settings).dump();
      const std::unique_ptr<KernelPlan> on_flash3 = sparge.plan(p, plan_options("flash3", "sparse_config_json", json));
      const std::unique_ptr<KernelPlan> on_sage2 = sparge_sage.plan(p, plan_options("", "sparse_config_json", json));
      DeviceInputs a(h, on_flash3->workspace_bytes()), b(h, on_sage2->workspace_bytes());
      cudaMemset(a.o.data(), 0xFF, a.o.bytes());
      cudaMemset(b.o.data(), 0xFF, b.o.bytes());
      const RunReport run_a = on_flash3->forward(a.args, nullptr);
      const RunReport run_b = on_sage2->forward(b.args, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(run_b.kernel_config, "sage2");
      const std::optional<RunReport::Sparse>& ra = run_a.sparse_stats();
      const std::optional<RunReport::Sparse>& rb = run_b.sparse_stats();
      ASSERT_TRUE(ra && rb && rb->predictor_ms);
      EXPECT_EQ(ra->predicted_sparsity, rb->predicted_sparsity);
      EXPECT_EQ(ra->achieved_sparsity, rb->achieved_sparsity);
      EXPECT_GT(rb->predicted_sparsity, 0.3);
      // sage2's own error (docs/kernels/sage.md: rel L1 up to 0.045 against the reference over
      // the sage suite's generators); measured here against sparge 0.035-0.038 (H200).
      EXPECT_LT(relative_l1(p, b.output(), a.output()), 0.05);

      // Sparsity 0: sage2's wgmma kernel over every block, bitwise.
      settings.dense = true;
      const std::unique_ptr<KernelPlan> all =
          sparge_sage.plan(p, plan_options("", "sparse_config_json", sparse::to_json(settings).dump()));
      cudaMemset(b.o.data(), 0xFF, b.o.bytes());
      const RunReport all_run = all->forward(b.args, nullptr);
      const Backend& sage2 = Registry::global().find("sage2");
      const std::unique_ptr<KernelPlan> wgmma = sage2.plan(p, plan_options("wgmma"));
      DeviceInputs c(h, wgmma->workspace_bytes());
      cudaMemset(c.o.data(), 0xFF, c.o.bytes());
      EXPECT_EQ(wgmma->forward(c.args, nullptr).kernel_config, "wgmma");
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(b.output(), c.output());
      ASSERT_TRUE(all_run.sparse_stats());
      EXPECT_EQ(all_run.sparse_stats()->predicted_sparsity, 0.0);
    }
}

#endif  // ATTNSUITE_HAVE_CUDA

}  // namespace
}  // namespace attnsuite
