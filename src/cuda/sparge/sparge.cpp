// Host side of `sparge` and `block-sparse`: options, supports(), the workspace layout, and the
// launches. The predictor's time is inside forward() (it runs on the same stream, before the
// kernel) and is also measured on its own with events, for the result row's predictor_ms.
#include "cuda/sparge/sparge.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "attnsuite/error.hpp"
#include "cpu/sparse/sparse_backends.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/flash2/flash2.hpp"
#include "cuda/sparge/launch.hpp"

namespace attnsuite::cuda {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Offsets of the predictor's arrays in the workspace.
struct Layout {
  std::size_t q_mean, q_sim, k_mean, k_sim, index, count, counters, total;
  Layout(const AttentionProblem& p, sparse::BlockShape shape) {
    const std::size_t m_blocks = static_cast<std::size_t>((p.seq_q + shape.m - 1) / shape.m);
    const std::size_t n_blocks = static_cast<std::size_t>((p.seq_kv + shape.n - 1) / shape.n);
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
    counters = take(2 * sizeof(unsigned long long));  // kept blocks, P·V skips
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

class SparseCudaBackend final : public Backend {
 public:
  explicit SparseCudaBackend(bool predicted) : predicted_(predicted) {}

  std::string_view name() const override { return predicted_ ? "sparge" : "block-sparse"; }
  std::string_view display_name() const override {
    return predicted_ ? "sparge (predicted block-sparse attention on flash2)"
                      : "block-sparse (flash2 with a given block mask)";
  }
  Device device() const override { return {DeviceType::Cuda, 0}; }
  std::string capabilities() const override {
    return predicted_ ? "fp16/bf16, head dim 64/128, causal, window, GQA; --sparse-config FILE; sm80+"
                      : "fp16/bf16, head dim 64/128, causal, window, GQA; --block-mask SPEC; sm80+";
  }
  bool set_option(std::string_view key, const std::string& value) override {
    const bool taken = options_.set(key, value, predicted_);
    if (taken) {
      settings_heads_ = -1;  // upload again
      mask_key_.clear();
    }
    return taken;
  }
  void reset_options() override {
    options_ = sparse::SparseOptions{};
    settings_heads_ = -1;
    mask_key_.clear();
  }

  Support supports(const AttentionProblem& problem) const override {
    Support support = supports_problem_common(name(), problem);
    if (!support) return support;
    if (problem.head_dim != 64 && problem.head_dim != 128)
      return Support::no(fmt::format("head dim {} not supported by {}; allowed: 64, 128", problem.head_dim, name()));
    if (problem.dim_v() != problem.head_dim)
      return Support::no(fmt::format("head_dim_v {} != head_dim {} not supported by {}", problem.dim_v(),
                                     problem.head_dim, name()));
    if (problem.heads_q > 65535 || problem.batch > 65535)
      return Support::no(fmt::format("batch {} × heads {} not supported by {}; at most 65535 each", problem.batch,
                                     problem.heads_q, name()));
    const sparse::BlockShape shape = sparse::block_shape_for(problem.head_dim);
    const int n_blocks = (problem.seq_kv + shape.n - 1) / shape.n;
    if (predicted_ && n_blocks > sparge::kMaxKeyBlocks)
      return Support::no(fmt::format("seq_kv {} is {} key blocks of {}; the predictor sorts at most {}", problem.seq_kv,
                                     n_blocks, shape.n, sparge::kMaxKeyBlocks));
    support = options_.supports(problem, predicted_);
    if (!support) return support;
    return supports_device(name());
  }

  std::size_t workspace_bytes(const AttentionProblem& problem) const override {
    return predicted_ ? Layout(problem, sparse::block_shape_for(problem.head_dim)).total : 0;
  }

  void forward(const AttentionProblem& problem, const AttentionArgs& args, Stream stream) override {
    const Support support = supports(problem);
    if (!support) throw Error(ErrorKind::Unsupported, fmt::format("{}: {}", name(), support.reason));
    check_cuda_args(name(), problem, args);
    for (const TensorView* view : {&args.q, &args.k, &args.v, &args.o})
      if (!flash2::rows_aligned(*view))
        throw Error(ErrorKind::Unsupported, fmt::format("{}: every row of Q, K, V and O must start 16-byte aligned", name()));
    const sparse::BlockShape shape = sparse::block_shape_for(problem.head_dim);
    const sparge::Tiles tiles = sparge::tiles_for(problem.head_dim);
    ATTNSUITE_CHECK(tiles.m == shape.m && tiles.n == shape.n && tiles.rows_per_warp == shape.rows_per_group,
                    ErrorKind::Internal, "sparse::block_shape_for disagrees with flash2's tiles");
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    if (!start_) {
      start_ = std::make_unique<Event>();
      predicted_done_ = std::make_unique<Event>();
      done_ = std::make_unique<Event>();
    }
    upload_settings(problem);

    flash2::SparseParams params;
    static_cast<flash2::Params&>(params) = flash2::make_params(problem, args);
    params.m_blocks = (problem.seq_q + shape.m - 1) / shape.m;
    params.n_blocks = (problem.seq_kv + shape.n - 1) / shape.n;
    params.pv_threshold_log2 = settings_.as<float>() + 4 * problem.heads_q;
    unsigned long long* counters = nullptr;
    if (predicted_) {
      ATTNSUITE_CHECK(args.workspace != nullptr, ErrorKind::Usage, "sparge: needs workspace_bytes() of workspace");
      const Layout layout(problem, shape);
      auto* base = static_cast<unsigned char*>(args.workspace);
      counters = reinterpret_cast<unsigned long long*>(base + layout.counters);
      ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(counters, 0, 2 * sizeof(unsigned long long), cuda_stream));
      sparge::PredictorParams pp;
      pp.q = args.q.data;
      pp.k = args.k.data;
      pp.q_batch_stride = args.q.strides[0];
      pp.q_row_stride = args.q.strides[1];
      pp.q_head_stride = args.q.strides[2];
      pp.k_batch_stride = args.k.strides[0];
      pp.k_row_stride = args.k.strides[1];
      pp.k_head_stride = args.k.strides[2];
      pp.batch = problem.batch;
      pp.heads_q = problem.heads_q;
      pp.heads_kv = problem.heads_kv;
      pp.group_size = problem.group_size();
      pp.seq_q = problem.seq_q;
      pp.seq_kv = problem.seq_kv;
      pp.head_dim = problem.head_dim;
      pp.block_m = shape.m;
      pp.block_n = shape.n;
      pp.m_blocks = params.m_blocks;
      pp.n_blocks = params.n_blocks;
      pp.scale = problem.softmax_scale();
      pp.window_left = params.window_left;
      pp.window_right = params.window_right;
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
      ATTNSUITE_CUDA_CHECK(cudaEventRecord(predicted_done_->get(), cuda_stream));
      params.block_index = pp.block_index;
      params.block_count = pp.block_count;
      params.pv_skips = counters + 1;
    } else {
      upload_mask(problem, shape);
      params.block_index = mask_index_.as<int>();
      params.block_count = mask_count_.as<int>();
      counters = mask_counters_.as<unsigned long long>();
      ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(counters, 0, sizeof(unsigned long long), cuda_stream));
      params.pv_skips = counters;
    }
    sparge::launch_block_sparse(params, problem.dtype, stream);
    ATTNSUITE_CUDA_CHECK(cudaEventRecord(done_->get(), cuda_stream));
    last_counters_ = counters;
    last_problem_ = problem;
  }

  std::optional<SparseReport> last_sparse_report() const override {
    if (last_counters_ == nullptr) return std::nullopt;
    ATTNSUITE_CUDA_CHECK(cudaEventSynchronize(done_->get()));
    unsigned long long host[2] = {0, 0};
    sparse::SparseStats stats;
    const sparse::BlockShape shape = sparse::block_shape_for(last_problem_.head_dim);
    stats.visible_blocks = sparse::visible_block_count(last_problem_, shape);
    if (predicted_) {
      ATTNSUITE_CUDA_CHECK(cudaMemcpy(host, last_counters_, sizeof(host), cudaMemcpyDeviceToHost));
      stats.computed_blocks = static_cast<std::int64_t>(host[0]);
      stats.pv_skipped_groups = static_cast<std::int64_t>(host[1]);
    } else {
      ATTNSUITE_CUDA_CHECK(cudaMemcpy(host, last_counters_, sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      stats.computed_blocks = mask_kept_;
      stats.pv_skipped_groups = static_cast<std::int64_t>(host[0]);
    }
    stats.pv_groups = stats.computed_blocks * (shape.m / shape.rows_per_group);
    SparseReport report{stats.predicted_sparsity(), stats.achieved_sparsity(), std::nullopt};
    if (predicted_) {
      float ms = 0;
      ATTNSUITE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_->get(), predicted_done_->get()));
      report.predictor_ms = ms;
    }
    return report;
  }

 private:
  // Per q head: sim, cdf, topk, dense, then λ·log2(e) for the kernel: 5 × heads_q floats,
  // uploaded when the options or the head count change (not per forward).
  void upload_settings(const AttentionProblem& problem) {
    if (settings_heads_ == problem.heads_q) return;
    std::vector<float> host(static_cast<std::size_t>(5 * problem.heads_q));
    for (int h = 0; h < problem.heads_q; ++h) {
      const sparse::HeadSettings& s = options_.config.for_head(h);
      host[static_cast<std::size_t>(4 * h + 0)] = static_cast<float>(s.sim_threshold);
      host[static_cast<std::size_t>(4 * h + 1)] = static_cast<float>(s.cdf_threshold);
      host[static_cast<std::size_t>(4 * h + 2)] = static_cast<float>(s.topk);
      host[static_cast<std::size_t>(4 * h + 3)] = s.dense ? 1.0f : 0.0f;
      host[static_cast<std::size_t>(4 * problem.heads_q + h)] =
          static_cast<float>(s.pv_threshold * std::numbers::log2e);  // inf stays inf: never skips
    }
    if (settings_.bytes() < host.size() * 4) settings_ = DeviceBuffer(host.size() * 4);
    ATTNSUITE_CUDA_CHECK(cudaMemcpy(settings_.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    settings_heads_ = problem.heads_q;
  }

  // The user's mask on the device, made once per (problem, spec).
  void upload_mask(const AttentionProblem& problem, sparse::BlockShape shape) {
    const std::string key = problem.describe() + "|" + options_.mask_spec;
    if (key == mask_key_) return;
    const sparse::BlockMask mask = sparse::make_block_mask(options_.mask_spec, problem, shape);
    mask_index_ = DeviceBuffer(mask.index.size() * 4);
    mask_count_ = DeviceBuffer(mask.count.size() * 4);
    if (!mask_counters_.data()) mask_counters_ = DeviceBuffer(sizeof(unsigned long long));
    ATTNSUITE_CUDA_CHECK(cudaMemcpy(mask_index_.data(), mask.index.data(), mask.index.size() * 4, cudaMemcpyHostToDevice));
    ATTNSUITE_CUDA_CHECK(cudaMemcpy(mask_count_.data(), mask.count.data(), mask.count.size() * 4, cudaMemcpyHostToDevice));
    mask_kept_ = mask.kept_blocks();
    mask_key_ = key;
  }

  bool predicted_;
  sparse::SparseOptions options_;
  DeviceBuffer settings_;
  int settings_heads_ = -1;
  DeviceBuffer mask_index_, mask_count_, mask_counters_;
  std::int64_t mask_kept_ = 0;
  std::string mask_key_;
  std::unique_ptr<Event> start_, predicted_done_, done_;
  unsigned long long* last_counters_ = nullptr;
  AttentionProblem last_problem_;
};

}  // namespace

std::unique_ptr<Backend> make_sparge_backend() { return std::make_unique<SparseCudaBackend>(true); }
std::unique_ptr<Backend> make_block_sparse_backend() { return std::make_unique<SparseCudaBackend>(false); }

}  // namespace attnsuite::cuda
