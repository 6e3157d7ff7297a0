// Host side of `sparge`, `block-sparse` and `sparge-sage`: options, supports(), the workspace
// layout, the kernel choice, and the plan's launches. The predictor's time is inside forward()
// (it runs on the same stream, before the kernel) and is also measured on its own with events,
// for the result row's predictor_ms; RunReport::read_sparse reads that and the kept-block counters
// back once the caller has waited for the run.
#include "cuda/sparge/sparge.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "attnsuite/error.hpp"
#include "attnsuite/kernel_configs.hpp"
#include "cuda/common/attention_params.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/flash2/flash2.hpp"
#include "cuda/sage/sage.hpp"
#include "cuda/sparge/launch.hpp"
#include "sparse/options.hpp"
#if ATTNSUITE_HAVE_FLASH3
#include "cuda/flash3/flash3.hpp"
#include "cuda/flash3/launch.hpp"
#endif

namespace attnsuite::cuda {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The kept lists' counters in the workspace: kept blocks (the predictor's), P·V skips (flash2),
// kept tiles (the Hopper kernels').
constexpr int kCounters = 3;

// Offsets of the predictor's arrays in the workspace: the pooled blocks, the kept lists in
// blocks and (for the Hopper kernels) in tiles, the counters.
struct Layout {
  std::size_t q_mean, q_sim, k_mean, k_sim, index, count, tile_index, tile_count, counters, total;
  Layout(const AttentionProblem& p, sparse::BlockShape shape) {
    const std::size_t m_blocks = static_cast<std::size_t>((p.seq_q + shape.m - 1) / shape.m);
    const std::size_t n_blocks = static_cast<std::size_t>((p.seq_kv + shape.n - 1) / shape.n);
    const std::size_t n_tiles =
        static_cast<std::size_t>((p.seq_kv + sparge::kHopperTiles.n - 1) / sparge::kHopperTiles.n);
    const std::size_t q_items = static_cast<std::size_t>(p.batch) * p.heads_q * m_blocks;
    const std::size_t k_items = static_cast<std::size_t>(p.batch) * p.heads_kv * n_blocks;
    std::size_t at = 0;
    auto take = [&](std::size_t bytes) {
      const std::size_t offset = at;
      at += aligned(bytes);
      return offset;
    };
    q_mean = take(q_items * p.head_dim * 4);
    q_sim = take(q_items * 4);
    k_mean = take(k_items * p.head_dim * 4);
    k_sim = take(k_items * 4);
    index = take(q_items * n_blocks * 4);
    count = take(q_items * 4);
    tile_index = take(q_items * n_tiles * 4);
    tile_count = take(q_items * 4);
    counters = take(kCounters * sizeof(unsigned long long));
    total = at;
  }
};

class Event {
 public:
  Event() { ATTNSUITE_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { (void)cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// sparge, block-sparse and sparge-sage. The predictor and the masks always count in flash2's
// blocks (sparse::block_shape_for: 128 × 32 at d128, 128 × 64 at d64), so that a tuned config
// keeps the same keys whatever kernel runs. Which kernel runs the kept blocks (Path):
//  - flash3 on sm_90 where this build has it: it visits 128 × 128 tiles, each one where any of
//    its blocks is kept (the lists coarsened on the device, sparse::coarsen_mask); λ's P·V skip
//    is not applied there (it would need a warpgroup-wide vote per tile);
//  - flash2 elsewhere, or when kernel config "flash2" is chosen: the blocks themselves, λ per warp;
//  - sage2's wgmma kernel for sparge-sage: tiles as flash3; sm_90a only.
// Measured why (H200, 2026-12-04, tune --sparse on banded N 8k): selecting 128 × 128 blocks
// directly tuned to rel L1 ≤ 0.03 on the calibration inputs and gave 0.36 on the held-out one —
// dropping one 128-key block near the band loses 4× the mass of a 32-key one, so the cdf rule
// stops being smooth in its threshold.
enum class Kind { Sparge, BlockSparse, SpargeSage };
enum class Path { Flash2, Flash3, Sage2 };

bool hopper_kernels_here() {
#if ATTNSUITE_HAVE_FLASH3
  return static_cast<bool>(supports_hopper("sparge"));
#else
  return false;
#endif
}

// The blocks the kernel of `path` visits (the predictor's blocks, or the Hopper tiles).
sparse::BlockShape kernel_shape_of(Path path, int head_dim) {
  if (path == Path::Flash2) return sparse::block_shape_for(head_dim);
  return {sparge::kHopperTiles.m, sparge::kHopperTiles.n, sparge::kHopperTiles.rows_per_warp};
}

std::string_view path_name(Path path) {
  return path == Path::Flash2 ? "flash2" : path == Path::Flash3 ? "flash3" : "sage2";
}

// One problem's plan: the path, the options, and what a run uploads once (the per-head
// settings, the given mask) and reads back after each run (the counters, the predictor's events).
class SparsePlan final : public KernelPlan {
 public:
  SparsePlan(std::string_view backend, bool predicted, Path path, const AttentionProblem& problem,
             sparse::SparseOptions options, std::size_t workspace, const sage::Sage2BlockSparse* sage2)
      : backend_(backend),
        predicted_(predicted),
        path_(path),
        problem_(problem),
        options_(std::move(options)),
        workspace_(workspace),
        sage2_(sage2) {}

  // sparge and block-sparse: the kernel that runs the kept blocks ("flash3", "flash2");
  // sparge-sage: "sage2".
  std::string_view kernel_config() const override { return path_name(path_); }
  std::size_t workspace_bytes() const override { return workspace_; }

  // The report's counters are read back once the caller has waited for the run (read_sparse),
  // so that a timed forward holds no host round trip.
  RunReport forward(const AttentionArgs& args, Stream stream) override {
    run(args, stream);
    RunReport report;
    report.kernel_config = std::string(path_name(path_));
    report.read_sparse = [this] { return sparse_report(); };
    return report;
  }

 private:
  void run(const AttentionArgs& args, Stream stream) {
    const AttentionProblem& problem = problem_;
    check_cuda_args(backend_, problem, args);
    for (const TensorView* view : {&args.q, &args.k, &args.v, &args.o})
      if (!flash2::rows_aligned(*view))
        throw Error(ErrorKind::Unsupported,
                    fmt::format("{}: every row of Q, K, V and O must start 16-byte aligned", backend_));
    const Path path = path_;
    const sparse::BlockShape shape = sparse::block_shape_for(problem.head_dim);
    const sparse::BlockShape kernel_shape = kernel_shape_of(path, problem.head_dim);
    {
      const sparge::Tiles tiles = sparge::tiles_for(problem.head_dim);
      ATTNSUITE_CHECK(tiles.m == shape.m && tiles.n == shape.n && tiles.rows_per_warp == shape.rows_per_group,
                      ErrorKind::Internal, "sparse::block_shape_for disagrees with flash2's tiles");
      ATTNSUITE_CHECK(kernel_shape.m == shape.m && kernel_shape.n % shape.n == 0, ErrorKind::Internal,
                      "the Hopper tiles are not whole rows of the predictor's blocks");
    }
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    if (!start_) {
      start_ = std::make_unique<Event>();
      predicted_done_ = std::make_unique<Event>();
      done_ = std::make_unique<Event>();
    }
    upload_settings();

    const int m_blocks = (problem.seq_q + shape.m - 1) / shape.m;
    const int n_blocks = (problem.seq_kv + shape.n - 1) / shape.n;
    const int n_tiles = (problem.seq_kv + kernel_shape.n - 1) / kernel_shape.n;
    const int* block_index = nullptr;  // in the predictor's blocks
    const int* block_count = nullptr;
    const int* tile_index = nullptr;  // in the Hopper kernels' tiles
    const int* tile_count = nullptr;
    unsigned long long* counters = nullptr;
    unsigned long long* pv_skips = nullptr;
    AttentionArgs kernel_args = args;
    if (predicted_) {
      ATTNSUITE_CHECK(args.workspace != nullptr, ErrorKind::Usage,
                      fmt::format("{}: needs the plan's workspace_bytes() of workspace", backend_));
      const Layout layout(problem, shape);
      auto* base = static_cast<unsigned char*>(args.workspace);
      kernel_args.workspace = base + layout.total;  // sparge-sage: the quantized Q, K, V after the predictor's
      counters = reinterpret_cast<unsigned long long*>(base + layout.counters);
      ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(counters, 0, kCounters * sizeof(unsigned long long), cuda_stream));
      sparge::PredictorParams pp;
      copy_view(args.q, pp.q, pp.q_batch_stride, pp.q_row_stride, pp.q_head_stride);
      copy_view(args.k, pp.k, pp.k_batch_stride, pp.k_row_stride, pp.k_head_stride);
      fill_sizes(pp, problem);
      pp.block_m = shape.m;
      pp.block_n = shape.n;
      pp.m_blocks = m_blocks;
      pp.n_blocks = n_blocks;
      pp.scale = problem.softmax_scale();
      fill_window(pp, problem);
      pp.settings = settings_.as<float>();
      pp.sink = options_.config.sink ? 1 : 0;
      pp.q_mean = reinterpret_cast<float*>(base + layout.q_mean);
      pp.q_sim = reinterpret_cast<float*>(base + layout.q_sim);
      pp.k_mean = reinterpret_cast<float*>(base + layout.k_mean);
      pp.k_sim = reinterpret_cast<float*>(base + layout.k_sim);
      pp.block_index = reinterpret_cast<int*>(base + layout.index);
      pp.block_count = reinterpret_cast<int*>(base + layout.count);
      pp.kept_blocks = counters;
      ATTNSUITE_CUDA_CHECK(cudaEventRecord(start_->get(), cuda_stream));
      sparge::launch_predictor(pp, problem.dtype, stream);
      block_index = pp.block_index;
      block_count = pp.block_count;
      pv_skips = counters + 1;
      if (path != Path::Flash2) {
        sparge::CoarsenParams cp;
        cp.block_index = pp.block_index;
        cp.block_count = pp.block_count;
        cp.slots = problem.batch * problem.heads_q * m_blocks;
        cp.n_blocks = n_blocks;
        cp.n_tiles = n_tiles;
        cp.factor = kernel_shape.n / shape.n;
        cp.tile_index = reinterpret_cast<int*>(base + layout.tile_index);
        cp.tile_count = reinterpret_cast<int*>(base + layout.tile_count);
        cp.kept_tiles = counters + 2;
        sparge::launch_coarsen(cp, stream);
        tile_index = cp.tile_index;
        tile_count = cp.tile_count;
      }
      ATTNSUITE_CUDA_CHECK(cudaEventRecord(predicted_done_->get(), cuda_stream));
    } else {
      upload_mask(shape);
      block_index = mask_index_.as<int>();
      block_count = mask_count_.as<int>();
      tile_index = mask_tile_index_.as<int>();
      tile_count = mask_tile_count_.as<int>();
      counters = mask_counters_.as<unsigned long long>();
      ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(counters, 0, sizeof(unsigned long long), cuda_stream));
      pv_skips = counters;
    }
    switch (path) {
      case Path::Flash2: {
        flash2::SparseParams params;
        static_cast<flash2::Params&>(params) = flash2::make_params(problem, args);
        params.m_blocks = m_blocks;
        params.n_blocks = n_blocks;
        params.pv_threshold_log2 = settings_.as<float>() + 4 * problem.heads_q;
        params.block_index = block_index;
        params.block_count = block_count;
        params.pv_skips = pv_skips;
        sparge::launch_block_sparse(params, problem.dtype, stream);
        break;
      }
      case Path::Flash3: {
#if ATTNSUITE_HAVE_FLASH3
        flash3::Params params;
        fill_attention_params(params, problem, args);
        params.block_index = tile_index;
        params.block_count = tile_count;
        params.m_blocks = m_blocks;
        params.n_blocks = n_tiles;
        flash3::launch_forward(params, problem.dtype, stream);
#endif
        break;
      }
      case Path::Sage2: {
        const sage::BlockList list{tile_index, tile_count, m_blocks, n_tiles};
        sage2_->forward(problem, kernel_args, list, stream);
        break;
      }
    }
    ATTNSUITE_CUDA_CHECK(cudaEventRecord(done_->get(), cuda_stream));
    counters_ = counters;
  }

  // What the run just enqueued skipped, read back once it has finished.
  RunReport::Sparse sparse_report() const {
    ATTNSUITE_CUDA_CHECK(cudaEventSynchronize(done_->get()));
    unsigned long long host[kCounters] = {0, 0, 0};
    sparse::SparseStats stats;
    const sparse::BlockShape shape = sparse::block_shape_for(problem_.head_dim);
    stats.visible_blocks = sparse::visible_block_count(problem_, shape);
    std::int64_t kept_tiles = 0;
    if (predicted_) {
      ATTNSUITE_CUDA_CHECK(cudaMemcpy(host, counters_, sizeof(host), cudaMemcpyDeviceToHost));
      stats.computed_blocks = static_cast<std::int64_t>(host[0]);
      stats.pv_skipped_groups = static_cast<std::int64_t>(host[1]);
      kept_tiles = static_cast<std::int64_t>(host[2]);
    } else {
      ATTNSUITE_CUDA_CHECK(cudaMemcpy(host, counters_, sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      stats.computed_blocks = mask_kept_;
      stats.pv_skipped_groups = static_cast<std::int64_t>(host[0]);
      kept_tiles = mask_kept_tiles_;
    }
    stats.pv_groups = stats.computed_blocks * (shape.m / shape.rows_per_group);
    // Predicted: the predictor's (or mask's) blocks. Achieved: the work the kernel did — flash2
    // with its P·V skips; the Hopper kernels in whole tiles.
    double achieved = stats.achieved_sparsity();
    if (path_ != Path::Flash2) {
      const std::int64_t visible_tiles =
          sparse::visible_block_count(problem_, kernel_shape_of(path_, problem_.head_dim));
      achieved = visible_tiles > 0 ? 1.0 - static_cast<double>(kept_tiles) / static_cast<double>(visible_tiles) : 0.0;
    }
    RunReport::Sparse report{stats.predicted_sparsity(), achieved, std::nullopt};
    if (predicted_) {
      float ms = 0;
      ATTNSUITE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_->get(), predicted_done_->get()));
      report.predictor_ms = ms;
    }
    return report;
  }

  // Per q head: sim, cdf, topk, dense, then λ·log2(e) for the kernel: 5 × heads_q floats,
  // uploaded on the plan's first run (not per forward).
  void upload_settings() {
    if (settings_.data() != nullptr) return;
    std::vector<float> host(static_cast<std::size_t>(5 * problem_.heads_q));
    for (int h = 0; h < problem_.heads_q; ++h) {
      const sparse::HeadSettings& s = options_.config.for_head(h);
      host[static_cast<std::size_t>(4 * h + 0)] = static_cast<float>(s.sim_threshold);
      host[static_cast<std::size_t>(4 * h + 1)] = static_cast<float>(s.cdf_threshold);
      host[static_cast<std::size_t>(4 * h + 2)] = static_cast<float>(s.topk);
      host[static_cast<std::size_t>(4 * h + 3)] = s.dense ? 1.0f : 0.0f;
      host[static_cast<std::size_t>(4 * problem_.heads_q + h)] =
          static_cast<float>(s.pv_threshold * std::numbers::log2e);  // inf stays inf: never skips
    }
    settings_ = DeviceBuffer(host.size() * 4);
    ATTNSUITE_CUDA_CHECK(cudaMemcpy(settings_.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  }

  // The user's mask on the device, in blocks and in the Hopper kernels' tiles, made on the
  // plan's first run.
  void upload_mask(sparse::BlockShape shape) {
    if (mask_counters_.data() != nullptr) return;
    const sparse::BlockMask mask = sparse::make_block_mask(options_.mask_spec, problem_, shape);
    const int factor = kernel_shape_of(Path::Flash3, problem_.head_dim).n / shape.n;
    const sparse::BlockMask tiles = sparse::coarsen_mask(mask, factor);
    const auto upload = [](DeviceBuffer& buffer, const std::vector<std::int32_t>& host) {
      buffer = DeviceBuffer(std::max<std::size_t>(host.size() * 4, 4));
      ATTNSUITE_CUDA_CHECK(cudaMemcpy(buffer.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    };
    upload(mask_index_, mask.index);
    upload(mask_count_, mask.count);
    upload(mask_tile_index_, tiles.index);
    upload(mask_tile_count_, tiles.count);
    mask_kept_ = mask.kept_blocks();
    mask_kept_tiles_ = tiles.kept_blocks();
    mask_counters_ = DeviceBuffer(sizeof(unsigned long long));
  }

  std::string_view backend_;
  bool predicted_;
  Path path_;
  AttentionProblem problem_;
  sparse::SparseOptions options_;
  std::size_t workspace_;
  const sage::Sage2BlockSparse* sage2_;
  DeviceBuffer settings_;
  DeviceBuffer mask_index_, mask_count_, mask_tile_index_, mask_tile_count_, mask_counters_;
  std::int64_t mask_kept_ = 0, mask_kept_tiles_ = 0;
  std::unique_ptr<Event> start_, predicted_done_, done_;
  unsigned long long* counters_ = nullptr;
};

BackendIdentity identity(Kind kind) {
  // What the three take alike, then what each adds.
  const auto sparse_identity = [](const char* name, const char* display_name, std::string_view adds) {
    return BackendIdentity{name,
                           display_name,
                           {DeviceType::Cuda, 0},
                           fmt::format("fp16/bf16, head dim 64/128, causal, window, GQA; {}", adds)};
  };
  switch (kind) {
    case Kind::Sparge:
      return sparse_identity("sparge", "sparge (predicted block-sparse attention on flash3 / flash2)",
                             "--sparse-config FILE; flash3 kernel on sm_90 (128x128 blocks), flash2 on sm80+ (kernel "
                             "config flash2)");
    case Kind::BlockSparse:
      return sparse_identity("block-sparse", "block-sparse (flash3 / flash2 with a given block mask)",
                             "--block-mask SPEC; flash3 kernel on sm_90, flash2 on sm80+");
    case Kind::SpargeSage:
      break;
  }
  return sparse_identity("sparge-sage", "sparge-sage (predicted block-sparse attention on sage2)",
                         "--sparse-config FILE; sage2's INT8/FP8 wgmma kernel (128x128 blocks), sm_90a only; "
                         "quantization included");
}

class SparseCudaBackend final : public IdentifiedBackend {
 public:
  explicit SparseCudaBackend(Kind kind)
      : IdentifiedBackend(identity(kind)), kind_(kind), predicted_(kind != Kind::BlockSparse) {
    if (kind == Kind::SpargeSage) sage2_ = sage::make_sage2_block_sparse();
  }

  std::vector<std::string> option_keys() const override { return sparse::SparseOptions::keys(predicted_); }
  void check_options(const std::map<std::string, std::string>& options) const override {
    (void)sparse::SparseOptions::parse(options, predicted_);
  }

  // Which kernel runs the kept blocks: flash3 where it runs (listed first: the built-in choice),
  // flash2; sparge-sage has no choice (sage2).
  std::vector<std::string> kernel_configs(const AttentionProblem&) const override {
    if (kind_ == Kind::SpargeSage) return {};
    if (hopper_kernels_here()) return {"flash3", "flash2"};
    return {"flash2"};
  }
  KernelConfigKey kernel_config_key(const AttentionProblem& problem, const PlanOptions& options) const override {
    return cuda::kernel_config_key(plan_device(options), std::string(name()), problem);
  }

  Support supports(const AttentionProblem& problem) const override {
    Support support = supports_problem_common(name(), problem);
    if (!support) return support;
    constexpr int kHeadDims[] = {64, 128};
    support = supports_shape(name(), problem, kHeadDims);
    if (!support) return support;
    const sparse::BlockShape shape = sparse::block_shape_for(problem.head_dim);
    const int n_blocks = (problem.seq_kv + shape.n - 1) / shape.n;
    if (predicted_ && n_blocks > sparge::kMaxKeyBlocks)
      return Support::no(fmt::format("seq_kv {} is {} key blocks of {}; the predictor sorts at most {}", problem.seq_kv,
                                     n_blocks, shape.n, sparge::kMaxKeyBlocks));
    if (kind_ == Kind::SpargeSage) return sage2_->supports(problem);
    return supports_device(name());
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& plan_options) const override {
    require_support(*this, problem);
    const std::string config = choose_kernel_config(*this, problem, plan_options);
    sparse::SparseOptions options = sparse::SparseOptions::parse(plan_options.options, predicted_);
    if (const Support support = options.supports(problem, predicted_); !support)
      throw Error(ErrorKind::Unsupported, fmt::format("{}: {}", name(), support.reason));
    const Path path = kind_ == Kind::SpargeSage ? Path::Sage2 : config == "flash3" ? Path::Flash3 : Path::Flash2;
    std::size_t workspace = 0;
    if (predicted_) {
      workspace = Layout(problem, sparse::block_shape_for(problem.head_dim)).total;
      if (kind_ == Kind::SpargeSage) workspace += sage2_->workspace_bytes(problem);
    }
    return std::make_unique<SparsePlan>(name(), predicted_, path, problem, std::move(options), workspace, sage2_.get());
  }

 private:
  Kind kind_;
  bool predicted_;
  std::unique_ptr<sage::Sage2BlockSparse> sage2_;
};

}  // namespace

std::unique_ptr<Backend> make_sparge_backend() { return std::make_unique<SparseCudaBackend>(Kind::Sparge); }
std::unique_ptr<Backend> make_block_sparse_backend() { return std::make_unique<SparseCudaBackend>(Kind::BlockSparse); }
std::unique_ptr<Backend> make_sparge_sage_backend() { return std::make_unique<SparseCudaBackend>(Kind::SpargeSage); }

}  // namespace attnsuite::cuda
