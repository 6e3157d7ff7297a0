#include "tune/sparse_tuner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "attnsuite/device_context.hpp"
#include "attnsuite/error.hpp"
#include "attnsuite/registry.hpp"
#include "bench/generators.hpp"
#include "core/parallel.hpp"

namespace attnsuite::tune {

void SparseTarget::validate() const {
  const char* name = metric == SparseMetric::RelL1    ? "--target"
                     : metric == SparseMetric::Cosine ? "--target-cos"
                                                      : "--target-rmse";
  if (!(value > 0.0 && value < 1.0))
    throw Error(ErrorKind::Usage,
                fmt::format("{} {} out of range; allowed: greater than 0 and less than 1", name, value));
  if (!(margin > 0.0 && margin <= 1.0))
    throw Error(ErrorKind::Usage, fmt::format("--margin {} out of range; allowed: greater than 0, at most 1", margin));
  if (!(min_sparsity >= 0.0 && min_sparsity < 1.0))
    throw Error(ErrorKind::Usage,
                fmt::format("--min-sparsity {} out of range; allowed: 0 to less than 1", min_sparsity));
}

SparseTuneResult tune_sparse_layer(const LayerEvaluator& evaluate, int heads, const SparseTarget& target,
                                   const SparseSearch& search) {
  target.validate();
  const auto start = std::chrono::steady_clock::now();
  SparseTuneResult result;
  const auto h_count = static_cast<std::size_t>(heads);
  auto run = [&](const std::vector<sparse::HeadSettings>& settings) {
    sparse::SparseConfig config;
    config.heads = settings;
    ++result.evaluations;
    std::vector<HeadOutcome> outcome = evaluate(config);
    ATTNSUITE_CHECK(outcome.size() == h_count, ErrorKind::Internal, "evaluator returned the wrong number of heads");
    return outcome;
  };
  const double tight = target.allowed_error() * target.margin;

  // Steps 1–2: per similarity threshold, bisection on the cdf; keep each head's sparsest.
  std::vector<sparse::HeadSettings> best(h_count);
  std::vector<double> best_sparsity(h_count, -1.0);
  for (auto& s : best) s.cdf_threshold = 1.0;
  for (const double sim : search.sim_candidates) {
    // Bisection on t in [0, 1], cdf(t) = 1 − (1 − cdf_low)·(kTop / (1 − cdf_low))^t: uniform
    // in log(1 − cdf), so the steps are as fine near 1 as the error needs (on `banded` the
    // error rises from 0.02 to 0.16 between cdf 0.98 and 0.95; linear steps of 1/128 from 0.3
    // never resolved that and left the heads dense).
    constexpr double kTop = 1e-4;
    auto cdf_of = [&](double t) { return 1.0 - (1.0 - search.cdf_low) * std::pow(kTop / (1.0 - search.cdf_low), t); };
    std::vector<double> low(h_count, 0.0), high(h_count, 1.0), high_cdf(h_count, 1.0), high_sparsity(h_count, 0.0);
    for (int step = 0; step < search.bisection_steps; ++step) {
      std::vector<sparse::HeadSettings> settings(h_count);
      std::vector<double> t(h_count);
      for (std::size_t h = 0; h < h_count; ++h) {
        t[h] = step == 0 ? 0.0 : 0.5 * (low[h] + high[h]);
        settings[h].sim_threshold = sim;
        settings[h].cdf_threshold = cdf_of(t[h]);
      }
      const std::vector<HeadOutcome> outcome = run(settings);
      for (std::size_t h = 0; h < h_count; ++h) {
        if (outcome[h].error(target.metric) <= tight) {
          high[h] = t[h];
          high_cdf[h] = settings[h].cdf_threshold;
          high_sparsity[h] = outcome[h].predicted_sparsity;
        } else {
          low[h] = t[h];
        }
      }
    }
    for (std::size_t h = 0; h < h_count; ++h)
      if (high_sparsity[h] > best_sparsity[h]) {
        best_sparsity[h] = high_sparsity[h];
        best[h].sim_threshold = sim;
        best[h].cdf_threshold = high_cdf[h];
      }
  }
  // Step 3: the smallest λ that keeps the full target.
  for (const double lambda : search.lambda_candidates) {
    std::vector<sparse::HeadSettings> settings = best;
    bool any = false;
    for (std::size_t h = 0; h < h_count; ++h)
      if (!std::isfinite(best[h].pv_threshold) && best_sparsity[h] >= target.min_sparsity) {
        settings[h].pv_threshold = lambda;
        any = true;
      }
    if (!any) break;
    const std::vector<HeadOutcome> outcome = run(settings);
    for (std::size_t h = 0; h < h_count; ++h)
      if (std::isfinite(settings[h].pv_threshold) &&
          outcome[h].error(target.metric) <= target.allowed_error() * (1.0 + target.margin) / 2.0)
        best[h].pv_threshold = lambda;
  }
  // Step 4: heads without useful sparsity compute densely.
  for (std::size_t h = 0; h < h_count; ++h)
    if (best_sparsity[h] < target.min_sparsity) {
      best[h] = sparse::HeadSettings{};
      best[h].cdf_threshold = 1.0;
      best[h].dense = true;
    }
  result.config.heads = best;
  result.outcome = run(best);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

struct BackendLayerEvaluator::State {
  AttentionProblem problem;
  const Backend* sparse = nullptr;
  PlanOptions sparse_options;  // kernel config "flash2" for exact selection; the candidate's config
  std::unique_ptr<bench::DeviceContext> context;
  struct Input {
    std::vector<unsigned char> q, k, v;  // dtype, dense BSHD
    std::unique_ptr<bench::DeviceAllocation> dq, dk, dv;
    std::vector<float> dense_out;  // (batch, seq_q, heads_q, dim_v)
    sparse::PooledBlocks pooled_q, pooled_k;
  };
  std::vector<Input> inputs;
  std::unique_ptr<bench::DeviceAllocation> out, workspace;
  std::vector<unsigned char> host_out;
  std::string kernel_config;  // what the last evaluation's plan ran

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  AttentionArgs args_for(const Input& in) const {
    AttentionArgs args;
    const Device device = context->device();
    auto view = [&](void* data, int seq, int heads, int dim) {
      TensorView t;
      t.data = data;
      t.dtype = problem.dtype;
      t.device = device;
      t.shape = {problem.batch, seq, heads, dim};
      t.strides = TensorView::dense_strides(t.shape, Layout::BSHD);
      return t;
    };
    args.q = view(in.dq->data(), problem.seq_q, problem.heads_q, problem.head_dim);
    args.k = view(in.dk->data(), problem.seq_kv, problem.heads_kv, problem.head_dim);
    args.v = view(in.dv->data(), problem.seq_kv, problem.heads_kv, problem.dim_v());
    args.o = view(out->data(), problem.seq_q, problem.heads_q, problem.dim_v());
    args.workspace = workspace ? workspace->data() : nullptr;
    return args;
  }
};

BackendLayerEvaluator::BackendLayerEvaluator(const AttentionProblem& problem, const std::string& sparse_backend,
                                             const std::string& dense_backend,
                                             const std::vector<std::string>& generators, std::uint64_t seed,
                                             int calibration_inputs, bool exact_selection)
    : state_(std::make_shared<State>()) {
  problem.validate();
  if (calibration_inputs < 1 || calibration_inputs > 64)
    throw Error(ErrorKind::Usage, fmt::format("--calibration {} out of range; allowed: 1 to 64", calibration_inputs));
  State& s = *state_;
  s.problem = problem;
  Registry& registry = Registry::global();
  s.sparse = &registry.find(sparse_backend);
  const Backend& dense = registry.find(dense_backend);
  const std::vector<std::string> keys = s.sparse->option_keys();
  if (std::find(keys.begin(), keys.end(), "sparse_config_json") == keys.end())
    throw Error(
        ErrorKind::Usage,
        fmt::format("backend '{}' has no predictor to tune; use sparge, sparge-sage or cpu-sparge", sparse_backend));
  if (exact_selection) {
    const std::vector<std::string> configs = s.sparse->kernel_configs(problem);
    if (std::find(configs.begin(), configs.end(), "flash2") != configs.end()) s.sparse_options.kernel_config = "flash2";
  }
  s.sparse_options.options["sparse_config_json"] = sparse::to_json(sparse::HeadSettings{}).dump();
  for (const Backend* b : {s.sparse, &dense}) require_support(*b, problem);
  const std::unique_ptr<KernelPlan> dense_plan = dense.plan(problem, {});
  const std::unique_ptr<KernelPlan> sparse_plan = s.sparse->plan(problem, s.sparse_options);
  if (dense.device() != s.sparse->device())
    throw Error(ErrorKind::Usage, fmt::format("dense backend '{}' and sparse backend '{}' are on different devices",
                                              dense.name(), sparse_backend));
  s.context = bench::make_device_context(s.sparse->device());
  const std::size_t element = size_of(problem.dtype);
  const std::size_t nq = static_cast<std::size_t>(problem.batch) * problem.seq_q * problem.heads_q * problem.head_dim;
  const std::size_t nk = static_cast<std::size_t>(problem.batch) * problem.seq_kv * problem.heads_kv * problem.head_dim;
  const std::size_t nv = static_cast<std::size_t>(problem.batch) * problem.seq_kv * problem.heads_kv * problem.dim_v();
  const std::size_t no = static_cast<std::size_t>(problem.batch) * problem.seq_q * problem.heads_q * problem.dim_v();
  s.out = s.context->allocate(no * element);
  s.host_out.resize(no * element);
  const std::size_t workspace = std::max(sparse_plan->workspace_bytes(), dense_plan->workspace_bytes());
  if (workspace > 0) s.workspace = s.context->allocate(workspace);
  const sparse::BlockShape shape = sparse::block_shape_for(problem.head_dim);
  for (int n = 0; n < calibration_inputs * static_cast<int>(generators.size()); ++n) {
    const int i = n % calibration_inputs;
    const std::string& generator = generators[static_cast<std::size_t>(n / calibration_inputs)];
    State::Input in;
    std::vector<float> q(nq), k(nk), v(nv);
    bench::find_generator(generator).fill(problem, seed + static_cast<std::uint64_t>(i), q, k, v);
    for (auto [src, dst] : {std::pair{&q, &in.q}, std::pair{&k, &in.k}, std::pair{&v, &in.v}}) {
      dst->resize(src->size() * element);
      convert_from_float(src->data(), dst->data(), problem.dtype, src->size());
    }
    in.dq = s.context->allocate(in.q.size());
    in.dk = s.context->allocate(in.k.size());
    in.dv = s.context->allocate(in.v.size());
    s.context->copy_to_device(in.dq->data(), in.q.data(), in.q.size());
    s.context->copy_to_device(in.dk->data(), in.k.data(), in.k.size());
    s.context->copy_to_device(in.dv->data(), in.v.data(), in.v.size());
    const AttentionArgs args = s.args_for(in);
    dense_plan->forward(args, s.context->stream());
    s.context->synchronize();
    s.context->copy_to_host(s.host_out.data(), s.out->data(), s.host_out.size());
    in.dense_out.resize(no);
    convert_to_float(s.host_out.data(), problem.dtype, in.dense_out.data(), no);
    // The host's copy of the predictor's pooling, for per-head predicted sparsity.
    AttentionArgs host_args;
    host_args.q = args.q;
    host_args.q.data = in.q.data();
    host_args.k = args.k;
    host_args.k.data = in.k.data();
    in.pooled_q = sparse::pool_blocks(host_args.q, shape.m);
    in.pooled_k = sparse::pool_blocks(host_args.k, shape.n);
    s.inputs.push_back(std::move(in));
  }
}

BackendLayerEvaluator::~BackendLayerEvaluator() = default;

const std::string& BackendLayerEvaluator::kernel_config() const { return state_->kernel_config; }

std::vector<HeadOutcome> BackendLayerEvaluator::operator()(const sparse::SparseConfig& config) {
  State& s = *state_;
  const AttentionProblem& p = s.problem;
  nlohmann::json document = {{"format", "attnsuite-sparse-config"}, {"version", 1}, {"sink", config.sink}};
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : config.heads) heads.push_back(sparse::to_json(h));
  document["layers"] = nlohmann::json::array({{{"heads", heads}}});
  PlanOptions options = s.sparse_options;
  options.options["sparse_config_json"] = document.dump();
  const std::unique_ptr<KernelPlan> plan = s.sparse->plan(p, options);
  s.kernel_config = std::string(plan->kernel_config());
  const sparse::BlockShape shape = sparse::block_shape_for(p.head_dim);
  const int dv = p.dim_v();
  std::vector<HeadOutcome> worst(static_cast<std::size_t>(p.heads_q));
  std::vector<float> out(s.inputs.empty() ? 0 : s.inputs[0].dense_out.size());
  bool first = true;
  for (const State::Input& in : s.inputs) {
    plan->forward(s.args_for(in), s.context->stream());
    s.context->synchronize();
    s.context->copy_to_host(s.host_out.data(), s.out->data(), s.host_out.size());
    convert_to_float(s.host_out.data(), p.dtype, out.data(), out.size());
    const sparse::BlockMask mask = sparse::select_blocks(p, shape, config, in.pooled_q, in.pooled_k);
    // Heads in parallel: on the GPU the host side of a step (this, and the host predictor
    // for per-head sparsity) is most of its time.
    std::vector<HeadOutcome> current(static_cast<std::size_t>(p.heads_q));
    cpu::parallel_for(p.heads_q, cpu::cpu_threads(), [&](std::int64_t head, int) {
      const int h = static_cast<int>(head);
      double abs_diff = 0, abs_ref = 0, dot = 0, norm_o = 0, norm_r = 0, sq = 0;
      std::int64_t count = 0;
      for (int b = 0; b < p.batch; ++b)
        for (int i = 0; i < p.seq_q; ++i) {
          const std::size_t base = ((static_cast<std::size_t>(b) * p.seq_q + i) * p.heads_q + h) * dv;
          for (int d = 0; d < dv; ++d) {
            const double o = out[base + d], r = in.dense_out[base + d];
            abs_diff += std::abs(o - r);
            abs_ref += std::abs(r);
            dot += o * r;
            norm_o += o * o;
            norm_r += r * r;
            sq += (o - r) * (o - r);
            ++count;
          }
        }
      HeadOutcome outcome;
      outcome.rel_l1 = abs_ref > 0 ? abs_diff / abs_ref : abs_diff;
      outcome.cosine = norm_o > 0 && norm_r > 0 ? dot / std::sqrt(norm_o * norm_r) : (norm_o == norm_r ? 1.0 : 0.0);
      outcome.rmse = count > 0 ? std::sqrt(sq / static_cast<double>(count)) : 0.0;
      if (!std::isfinite(outcome.rel_l1)) outcome.rel_l1 = INFINITY;
      std::int64_t kept = 0, visible = 0;
      for (int b = 0; b < p.batch; ++b)
        for (int mb = 0; mb < mask.m_blocks; ++mb) {
          kept += mask.count[mask.slot(b, h, mb)];
          const auto [lo, hi] = sparse::visible_blocks(p, shape, mb);
          visible += hi - lo;
        }
      outcome.predicted_sparsity = visible > 0 ? 1.0 - static_cast<double>(kept) / static_cast<double>(visible) : 0.0;
      current[static_cast<std::size_t>(h)] = outcome;
    });
    for (std::size_t h = 0; h < current.size(); ++h) {
      const HeadOutcome& outcome = current[h];
      HeadOutcome& w = worst[h];
      if (first) {
        w = outcome;
      } else {
        w.rel_l1 = std::max(w.rel_l1, outcome.rel_l1);
        w.rmse = std::max(w.rmse, outcome.rmse);
        w.cosine = std::min(w.cosine, outcome.cosine);
        w.predicted_sparsity = std::min(w.predicted_sparsity, outcome.predicted_sparsity);
      }
    }
    first = false;
  }
  return worst;
}

nlohmann::json layer_json(const std::string& name, const AttentionProblem& problem, const SparseTuneResult& result,
                          const SparseTarget& target) {
  nlohmann::json heads = nlohmann::json::array();
  for (std::size_t h = 0; h < result.config.heads.size(); ++h) {
    nlohmann::json j = sparse::to_json(result.config.heads[h]);
    const HeadOutcome& o = result.outcome[h];
    j["calibration"] = {
        {"rel_l1", o.rel_l1}, {"cosine", o.cosine}, {"rmse", o.rmse}, {"predicted_sparsity", o.predicted_sparsity}};
    heads.push_back(j);
  }
  const char* metric = target.metric == SparseMetric::RelL1    ? "rel_l1"
                       : target.metric == SparseMetric::Cosine ? "cosine"
                                                               : "rmse";
  return {{"name", name},
          {"shape", problem.describe()},
          {"heads_q", problem.heads_q},
          {"target", {{"metric", metric}, {"value", target.value}, {"margin", target.margin}}},
          {"evaluations", result.evaluations},
          {"seconds", result.seconds},
          {"heads", heads}};
}

}  // namespace attnsuite::tune
