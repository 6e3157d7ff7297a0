#include "bench/runner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

#include "attnsuite/error.hpp"
#include "bench/generators.hpp"
#include "core/cancel.hpp"
#include "core/host_info.hpp"
#include "cpu/common.hpp"
#include "cpu/cpu_backends.hpp"

namespace attnsuite::bench {

void AccuracyAccumulator::add(double out, double ref) {
  if (!std::isfinite(out)) {
    ++non_finite_;
    return;
  }
  const double diff = out - ref;
  max_abs_ = std::max(max_abs_, std::abs(diff));
  sum_sq_diff_ += diff * diff;
  sum_sq_ref_ += ref * ref;
  sum_sq_out_ += out * out;
  sum_abs_diff_ += std::abs(diff);
  sum_abs_ref_ += std::abs(ref);
  sum_dot_ += out * ref;
  ++count_;
}

AccuracyStats AccuracyAccumulator::finish() const {
  AccuracyStats s;
  s.compared = count_;
  s.non_finite = non_finite_;
  s.max_abs_err = max_abs_;
  s.rel_l2 = sum_sq_ref_ > 0 ? std::sqrt(sum_sq_diff_ / sum_sq_ref_) : std::sqrt(sum_sq_diff_);
  s.rel_l1 = sum_abs_ref_ > 0 ? sum_abs_diff_ / sum_abs_ref_ : sum_abs_diff_;
  // Both all-zero (every row fully masked): identical, cosine 1.
  const double norms = std::sqrt(sum_sq_out_) * std::sqrt(sum_sq_ref_);
  s.cos_sim = norms > 0 ? sum_dot_ / norms : (sum_sq_out_ == 0 && sum_sq_ref_ == 0 ? 1.0 : 0.0);
  s.rmse = count_ > 0 ? std::sqrt(sum_sq_diff_ / count_) : 0.0;
  return s;
}

namespace {

std::string device_string(Device device) {
  return device.type == DeviceType::Cpu ? "cpu" : fmt::format("cuda:{}", device.index);
}

struct HostTensor {
  std::vector<unsigned char> bytes;
  TensorView view;
};

HostTensor make_host_tensor(const std::vector<float>& dense_bshd, std::array<std::int64_t, 4> shape, DType dtype,
                            Layout layout) {
  HostTensor t;
  t.bytes.resize(dense_bshd.size() * size_of(dtype));
  t.view.data = t.bytes.data();
  t.view.dtype = dtype;
  t.view.shape = shape;
  t.view.strides = TensorView::dense_strides(shape, layout);
  if (layout == Layout::BSHD) {
    convert_from_float(dense_bshd.data(), t.bytes.data(), dtype, dense_bshd.size());
    return t;
  }
  const std::int64_t d = shape[3];
  std::int64_t source = 0;
  for (std::int64_t b = 0; b < shape[0]; ++b)
    for (std::int64_t s = 0; s < shape[1]; ++s)
      for (std::int64_t h = 0; h < shape[2]; ++h, source += d) {
        auto* dst = t.bytes.data() + t.view.offset(b, s, h, 0) * size_of(dtype);
        convert_from_float(dense_bshd.data() + source, dst, dtype, static_cast<std::size_t>(d));
      }
  return t;
}

constexpr double kGiB = 1073741824.0;

// Element counts of Q, K and V (validate() bounds each by 2^53).
struct TensorSizes {
  double q, k, v;
  explicit TensorSizes(const AttentionProblem& p)
      : q(static_cast<double>(p.batch) * p.seq_q * p.heads_q * p.head_dim),
        k(static_cast<double>(p.batch) * p.seq_kv * p.heads_kv * p.head_dim),
        v(static_cast<double>(p.batch) * p.seq_kv * p.heads_kv * p.dim_v()) {}
};

// Host bytes Runner::prepare() holds at its peak for a shape: the fp32 inputs it generates
// together with their copies in the problem's dtype, then those copies with the fp64 reference
// of the compared rows (and each thread's fp64 copy of one head's K and V).
double prepare_host_bytes(const AttentionProblem& p, double reference_gflop) {
  const TensorSizes n(p);
  const double inputs = (n.q + n.k + n.v) * static_cast<double>(size_of(p.dtype));
  const double generated = (n.q + n.k + n.v) * sizeof(float);
  const double total_rows = static_cast<double>(p.batch) * p.heads_q * p.seq_q;
  const double row_gflop = p.flops() * 1e-9 / total_rows;
  const double rows = p.flops() * 1e-9 <= reference_gflop
                          ? total_rows
                          : std::clamp(std::floor(reference_gflop / std::max(row_gflop, 1e-12)), 1.0, total_rows);
  const double reference = rows * (static_cast<double>(p.dim_v()) + 2.0) * sizeof(double) +
                           cpu::cpu_threads() * static_cast<double>(p.seq_kv) * (p.head_dim + p.dim_v() + 1) *
                               sizeof(double);
  return inputs + std::max(generated, reference);
}

}  // namespace

struct Runner::Prepared {
  std::string shape_key;
  AttentionProblem problem;
  HostTensor q, k, v;
  // The compared output rows, as (b * heads_q + h) * seq_q + query row, ascending.
  std::vector<std::int64_t> rows;
  std::vector<double> reference_out;  // per compared row: dim_v values
  std::vector<double> reference_lse;  // per compared row
};

Runner::Runner(SweepSpec spec, Registry& registry) : spec_(std::move(spec)), registry_(registry) {
  apply_backend_options(spec_, registry_);
}

void apply_backend_options(const SweepSpec& spec, Registry& registry) {
  std::map<std::string, bool> taken;
  for (const auto& [key, value] : spec.backend_options) taken[key] = false;
  for (const auto& name : spec.backends) {
    if (!registry.contains(name)) continue;
    Backend& backend = registry.find(name);
    backend.reset_options();
    for (const auto& [key, value] : spec.backend_options)
      if (backend.set_option(key, value)) taken[key] = true;
  }
  for (const auto& [key, used] : taken)
    if (!used)
      throw Error(ErrorKind::Usage, fmt::format("backend option '{}' is taken by none of the backends ({}); sparse_config: "
                                                "sparge, sparge-sage, cpu-sparge; block_mask: block-sparse, cpu-block-sparse",
                                                key, fmt::join(spec.backends, ", ")));
}
Runner::~Runner() = default;

void Runner::use_cuda_device(int index) {
  cuda_device_ = index;
  (void)context_for({DeviceType::Cuda, index});  // the context makes its device current
}

Device Runner::device_of(const Backend& backend) const {
  Device device = backend.device();
  if (device.type == DeviceType::Cuda && cuda_device_ >= 0) device.index = cuda_device_;
  return device;
}

DeviceContext& Runner::context_for(Device device) {
  auto& slot = contexts_[{static_cast<int>(device.type), device.index}];
  if (!slot) slot = make_device_context(device);
  return *slot;
}

ResultRow row_for_case(const Case& c, Backend* backend) {
  ResultRow row;
  const auto& p = c.problem;
  row.backend = c.backend;
  if (backend != nullptr) {
    row.display_name = std::string(backend->display_name());
    row.peer_of = std::string(backend->peer_of());
    row.device = device_string(backend->device());
  }
  row.dtype = std::string(to_string(p.dtype));
  row.layout = std::string(to_string(p.layout));
  row.batch = p.batch;
  row.heads_q = p.heads_q;
  row.heads_kv = p.heads_kv;
  row.seq_q = p.seq_q;
  row.seq_kv = p.seq_kv;
  row.head_dim = p.head_dim;
  row.causal = p.causal;
  row.window_left = p.window_left;
  row.window_right = p.window_right;
  row.generator = c.generator;
  row.seed = c.seed;
  return row;
}

const Runner::Prepared& Runner::prepare(const Case& c) {
  ResultRow probe = row_for_case(c, nullptr);
  const std::string key = probe.shape_key();
  if (prepared_ && prepared_->shape_key == key) return *prepared_;
  prepared_.reset();

  auto prepared = std::make_unique<Prepared>();
  const auto& p = c.problem;
  prepared->shape_key = key;
  prepared->problem = p;
  const std::array<std::int64_t, 4> q_shape{p.batch, p.seq_q, p.heads_q, p.head_dim};
  const std::array<std::int64_t, 4> k_shape{p.batch, p.seq_kv, p.heads_kv, p.head_dim};
  const std::array<std::int64_t, 4> v_shape{p.batch, p.seq_kv, p.heads_kv, p.dim_v()};
  auto numel = [](const std::array<std::int64_t, 4>& s) { return static_cast<std::size_t>(s[0] * s[1] * s[2] * s[3]); };
  {
    std::vector<float> q(numel(q_shape)), k(numel(k_shape)), v(numel(v_shape));
    find_generator(c.generator).fill(p, c.seed, q, k, v);
    prepared->q = make_host_tensor(q, q_shape, p.dtype, p.layout);
    prepared->k = make_host_tensor(k, k_shape, p.dtype, p.layout);
    prepared->v = make_host_tensor(v, v_shape, p.dtype, p.layout);
  }

  // Which output rows the reference covers: all while that costs at most the GFLOP budget,
  // else rows evenly spaced over every (batch, head, query) position, the first and last included.
  // A sampled row is computed on its own (the reference cost of one N = 16k head is 140 GFLOP).
  const std::int64_t total_rows = static_cast<std::int64_t>(p.batch) * p.heads_q * p.seq_q;
  const std::size_t dv = static_cast<std::size_t>(p.dim_v());
  AttentionArgs args;
  args.q = prepared->q.view;
  args.k = prepared->k.view;
  args.v = prepared->v.view;
  if (p.flops() * 1e-9 <= spec_.reference_gflop) {
    prepared->rows.resize(static_cast<std::size_t>(total_rows));
    std::iota(prepared->rows.begin(), prepared->rows.end(), std::int64_t{0});
    prepared->reference_out.resize(prepared->rows.size() * dv);
    prepared->reference_lse.resize(prepared->rows.size());
    const std::size_t slice_rows = static_cast<std::size_t>(p.seq_q);
    cpu::parallel_for(static_cast<std::int64_t>(p.batch) * p.heads_q, cpu::cpu_threads(), [&](std::int64_t item, int) {
      const auto slice = static_cast<std::size_t>(item);
      cpu::reference_head_f64(p, args, static_cast<int>(slice / p.heads_q), static_cast<int>(slice % p.heads_q),
                              prepared->reference_out.data() + slice * slice_rows * dv,
                              prepared->reference_lse.data() + slice * slice_rows);
    });
  } else {
    const double row_gflop = p.flops() * 1e-9 / static_cast<double>(total_rows);
    const std::int64_t count = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(spec_.reference_gflop / std::max(row_gflop, 1e-12)), 1, total_rows);
    for (std::int64_t i = 0; i < count; ++i)
      prepared->rows.push_back(count == 1 ? 0 : i * (total_rows - 1) / (count - 1));
    prepared->rows.erase(std::unique(prepared->rows.begin(), prepared->rows.end()), prepared->rows.end());
    prepared->reference_out.resize(prepared->rows.size() * dv);
    prepared->reference_lse.resize(prepared->rows.size());
    const std::size_t element = size_of(p.dtype);
    cpu::parallel_for(static_cast<std::int64_t>(prepared->rows.size()), cpu::cpu_threads(), [&](std::int64_t item, int) {
      const auto n = static_cast<std::size_t>(item);
      const std::int64_t index = prepared->rows[n];
      const int slice = static_cast<int>(index / p.seq_q);
      const int b = slice / p.heads_q, h = slice % p.heads_q;
      const std::int64_t i = index % p.seq_q;
      double* out = prepared->reference_out.data() + n * dv;
      const std::int64_t begin = p.key_begin(i), end = p.key_end(i);
      if (end <= begin) {  // a row that sees no key
        std::fill(out, out + dv, 0.0);
        prepared->reference_lse[n] = -std::numeric_limits<double>::infinity();
        return;
      }
      // Row i alone: one query against the key prefix [0, end), keys before `begin` windowed away.
      AttentionProblem row_problem = p;
      row_problem.seq_q = 1;
      row_problem.seq_kv = static_cast<int>(end);
      row_problem.causal = false;
      row_problem.window_right = -1;
      row_problem.window_left = begin > 0 ? static_cast<int>(end - 1 - begin) : -1;
      AttentionArgs row_args = args;
      row_args.q.data = static_cast<unsigned char*>(args.q.data) + i * args.q.strides[1] * static_cast<std::int64_t>(element);
      row_args.q.shape[1] = 1;
      row_args.k.shape[1] = end;
      row_args.v.shape[1] = end;
      cpu::reference_head_f64(row_problem, row_args, b, h, out, prepared->reference_lse.data() + n);
    });
  }
  prepared_ = std::move(prepared);
  return *prepared_;
}

std::optional<ResultRow> Runner::run(const Case& c, const std::function<bool()>& cancelled) {
  // The reference's rows, the CPU kernels' work items and the timing loop stop on a cancel
  // request (SIGINT, SIGTERM) within the case, not after it (core/cancel.hpp).
  const CancellableScope cancellable;
  Backend* backend = nullptr;
  ResultRow row = row_for_case(c, nullptr);
  try {
    backend = &registry_.find(c.backend);
    row = row_for_case(c, backend);
    row.device = device_string(device_of(*backend));
  } catch (const Error& error) {
    row.status = CaseStatus::Failed;
    row.reason = error.what();
    row.error_kind = error.kind();
    return row;
  }
  if (!c.invalid_reason.empty()) {
    row.status = CaseStatus::Skipped;
    row.reason = c.invalid_reason;
    return row;
  }
  const auto& p = c.problem;
  const Support support = backend->supports(p);
  if (!support) {
    row.status = CaseStatus::Skipped;
    row.reason = support.reason;
    return row;
  }

  try {
    DeviceContext& ctx = context_for(device_of(*backend));
    row.gpu = ctx.device_name();

    // Refuse what cannot fit before anything is allocated, the inputs and the reference included:
    // Linux overcommits, so an allocation too large "succeeds" and the process is killed later.
    const std::size_t out_bytes = static_cast<std::size_t>(p.batch) * p.seq_q * p.heads_q * p.dim_v() * size_of(p.dtype);
    const std::size_t lse_bytes = static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * sizeof(float);
    const std::size_t workspace = backend->workspace_bytes(p);
    {
      const TensorSizes n(p);
      const double on_device =
          (n.q + n.k + n.v) * static_cast<double>(size_of(p.dtype)) + static_cast<double>(out_bytes + lse_bytes + workspace);
      const bool prepared = prepared_ && prepared_->shape_key == row_for_case(c, nullptr).shape_key();
      // The output is read back into a host copy of its own.
      double on_host = (prepared ? 0.0 : prepare_host_bytes(p, spec_.reference_gflop)) + static_cast<double>(out_bytes + lse_bytes);
      const bool host_device = backend->device().type == DeviceType::Cpu;
      if (host_device) on_host += on_device;
      const double host_free = static_cast<double>(host_info().available_memory_bytes());
      if (host_free > 0 && on_host > host_free)
        throw Error(ErrorKind::OutOfMemory,
                    fmt::format("out of memory: the case needs {:.2f} GiB of host memory{}, {:.2f} GiB free", on_host / kGiB,
                                host_device ? "" : " (inputs, fp64 reference, output copy)", host_free / kGiB));
      if (!host_device) {
        const double device_free = static_cast<double>(ctx.free_bytes());
        if (device_free > 0 && on_device > device_free)
          throw Error(ErrorKind::OutOfMemory,
                      fmt::format("out of memory: the case needs {:.2f} GiB on {}, {:.2f} GiB free", on_device / kGiB,
                                  device_string(device_of(*backend)), device_free / kGiB));
      }
    }
    const Prepared& in = prepare(c);

    auto q = ctx.allocate(in.q.bytes.size());
    auto k = ctx.allocate(in.k.bytes.size());
    auto v = ctx.allocate(in.v.bytes.size());
    AttentionArgs args;
    const Device device = device_of(*backend);
    auto on_device = [&](TensorView view, void* data) {
      view.data = data;
      view.device = device;
      return view;
    };
    args.q = on_device(in.q.view, q->data());
    args.k = on_device(in.k.view, k->data());
    args.v = on_device(in.v.view, v->data());
    // Inputs are generated where they are used (a GPU fills its own, bitwise equal to the
    // host's copy that the reference read); devices that cannot get the host copy.
    const GeneratorInfo& generator = find_generator(c.generator);
    std::uint64_t tensor_index = 0;
    for (auto [view, host] : {std::pair{&args.q, &in.q}, std::pair{&args.k, &in.k}, std::pair{&args.v, &in.v}}) {
      const bool generated =
          generator.device_kind &&
          ctx.generate(*view, *generator.device_kind, genmath::tensor_key(*generator.device_kind, c.seed, tensor_index));
      if (!generated) ctx.copy_to_device(view->data, host->bytes.data(), host->bytes.size());
      ++tensor_index;
    }
    TensorView o_view;
    o_view.dtype = p.dtype;
    o_view.shape = {p.batch, p.seq_q, p.heads_q, p.dim_v()};
    o_view.strides = TensorView::dense_strides(o_view.shape, p.layout);

    const double clock_start = ctx.clock_mhz();

    // The accuracy run, with the peak extra memory measured around it: everything allocated for
    // the forward beyond the inputs Q, K, V — the output and LSE included, as PyTorch's allocator
    // statistics count them for the peers.
    ctx.synchronize();
    ctx.reset_peak_memory();
    backend->reset_own_peak_memory();
    const std::optional<std::size_t> used_before = ctx.used_bytes();
    const bool own_output = backend->produces_own_output();
    std::unique_ptr<DeviceAllocation> o, lse, workspace_buffer;
    if (!own_output) {
      o = ctx.allocate(out_bytes);
      lse = ctx.allocate(lse_bytes);
      ctx.poison(o->data(), out_bytes);
      ctx.poison(lse->data(), lse_bytes);
      args.o = on_device(o_view, o->data());
      args.lse = {static_cast<float*>(lse->data()), device};
    }
    if (workspace > 0) {
      workspace_buffer = ctx.allocate(workspace);
      args.workspace = workspace_buffer->data();
    }
    backend->forward(p, args, ctx.stream());
    ctx.synchronize();
    row.kernel_config = backend->last_kernel_config();
    row.peak_mem_mib =
        static_cast<double>(ctx.peak_memory_since_reset() + backend->own_peak_memory_bytes()) / 1048576.0;
    if (const std::optional<std::size_t> used_after = ctx.used_bytes(); used_before && used_after)
      row.mem_reserved_mib =
          static_cast<double>(*used_after > *used_before ? *used_after - *used_before : 0) / 1048576.0;

    const std::optional<Backend::SparseReport> sparse_report = backend->last_sparse_report();
    if (sparse_report) {
      row.sparsity = sparse_report->achieved_sparsity;
      row.predicted_sparsity = sparse_report->predicted_sparsity;
      row.predictor_ms = sparse_report->predictor_ms;
    }
    TensorView result = own_output ? backend->produced_output() : args.o;
    LseView result_lse = own_output ? backend->produced_lse() : args.lse;
    ATTNSUITE_CHECK(!result.empty() && result.dtype == p.dtype && result.shape == o_view.shape, ErrorKind::Internal,
                    fmt::format("backend '{}' produced no output of the expected dtype and shape", c.backend));
    o_view = result;
    // Reads the output through its strides: copy the span it covers, then index.
    std::int64_t span = 1;
    for (int dim = 0; dim < 4; ++dim) span += (result.shape[dim] - 1) * result.strides[dim];
    std::vector<unsigned char> host_o(static_cast<std::size_t>(span) * size_of(p.dtype));
    ctx.copy_to_host(host_o.data(), result.data, host_o.size());
    std::vector<float> host_lse;
    if (!result_lse.empty()) {
      host_lse.resize(lse_bytes / sizeof(float));
      ctx.copy_to_host(host_lse.data(), result_lse.data, lse_bytes);
    }
    AccuracyAccumulator accuracy;
    std::int64_t lse_mismatches = 0;
    for (std::size_t n = 0; n < in.rows.size(); ++n) {
      const std::int64_t index = in.rows[n];
      const int slice = static_cast<int>(index / p.seq_q);
      const int b = slice / p.heads_q, h = slice % p.heads_q;
      const int s = static_cast<int>(index % p.seq_q);
      const double* ref = in.reference_out.data() + n * static_cast<std::size_t>(p.dim_v());
      for (int d = 0; d < p.dim_v(); ++d)
        accuracy.add(load_as_float(host_o.data(), p.dtype, o_view.offset(b, s, h, d)), ref[d]);
      if (host_lse.empty()) continue;
      const double ref_lse = in.reference_lse[n];
      const float got = host_lse[static_cast<std::size_t>(slice) * p.seq_q + s];
      const bool both_empty = std::isinf(ref_lse) && std::isinf(got) && got < 0;
      if (!both_empty && !(std::abs(got - ref_lse) <= 1e-2 + 1e-3 * std::abs(ref_lse))) ++lse_mismatches;
    }
    const AccuracyStats stats = accuracy.finish();
    row.max_abs_err = stats.max_abs_err;
    row.rel_l2 = stats.rel_l2;
    row.rel_l1 = stats.rel_l1;
    row.cos_sim = stats.cos_sim;
    row.rmse = stats.rmse;
    row.accuracy_fraction = static_cast<double>(in.rows.size()) / (static_cast<double>(p.batch) * p.heads_q * p.seq_q);
    if (stats.non_finite > 0) {
      row.status = CaseStatus::Failed;
      row.reason = fmt::format("output has {} NaN/Inf values among the compared elements", stats.non_finite);
      return row;
    }
    if (lse_mismatches > 0) row.reason = fmt::format("log-sum-exp differs from the reference in {} rows", lse_mismatches);

    // Timing.
    auto timer = ctx.make_timer();
    const bool cold = spec_.timing.cold;
    auto run_once = [&] { backend->forward(p, args, ctx.stream()); };
    // The predictor's time of each timed forward (read after the sample's own synchronization,
    // outside its timed span): the row gives their median, as ms_median is. The accuracy run's
    // figure is a cold, lone call — on the H200 after the fp64 reference it read 1.14 ms where the
    // timed forwards' whole median was 0.91 ms (sparge, banded, N 16k, 2026-12-04).
    std::vector<double> predictor_samples;
    const bool sparse_row = row.predictor_ms.has_value();
    auto sample = [&] {
      if (cold) ctx.flush_cache();
      timer->start();
      backend->forward(p, args, ctx.stream());
      timer->stop();
      const double ms = timer->elapsed_ms();
      if (sparse_row)
        if (const auto report = backend->last_sparse_report(); report && report->predictor_ms)
          predictor_samples.push_back(*report->predictor_ms);
      return ms;
    };
    std::unique_ptr<PeriodicSampler> sampler = ctx.start_sampling();
    const Measurement m = measure(
        [&] {
          run_once();
          ctx.synchronize();
        },
        sample, spec_.timing.measure, cancelled);
    const SampleSummary samples = sampler ? sampler->stop() : SampleSummary{};
    if (cancel_requested() || (cancelled && cancelled())) return std::nullopt;
    const double clock_end = ctx.clock_mhz();

    const Statistics& st = m.stats;
    if (!predictor_samples.empty()) row.predictor_ms = summarize(predictor_samples).median;
    row.reps = st.count;
    row.ms_median = st.median;
    row.ms_mean = st.mean;
    row.ms_p05 = st.p05;
    row.ms_p95 = st.p95;
    row.ms_min = st.min;
    row.ms_stddev = st.stddev;
    const double seconds = st.median * 1e-3;
    row.tokens_per_s = static_cast<double>(p.batch) * p.seq_q / seconds;
    row.tflops = p.flops() / seconds * 1e-12;
    if (row.sparsity) row.effective_tflops = p.flops() * (1.0 - *row.sparsity) / seconds * 1e-12;
    row.gbps = p.min_bytes() / seconds * 1e-9;
    if (clock_start > 0) row.clock_mhz = clock_start;
    if (samples.clock_mhz_mean) {
      row.clock_mhz = samples.clock_mhz_mean;
      row.clock_mhz_min = samples.clock_mhz_min;
    }
    row.gpu_util_pct = samples.gpu_util_pct_mean;
    auto note = [&](const std::string& text) { row.reason += (row.reason.empty() ? "" : "; ") + text; };
    if (clock_start > 0 && clock_end > 0 && clock_end < 0.9 * clock_start)
      note(fmt::format("SM clock dropped from {:.0f} to {:.0f} MHz during the case", clock_start, clock_end));
    if (!m.converged)
      note(fmt::format("noise target {:.1f}% not reached in the time budget (median ±{:.1f}%)",
                       spec_.timing.measure.noise_target * 100, st.relative_median_error() * 100));
  } catch (const Error& error) {
    if (error.kind() == ErrorKind::Cancelled) return std::nullopt;  // unfinished: not recorded
    row.status = CaseStatus::Failed;
    row.reason = error.what();
    row.error_kind = error.kind();
  } catch (const std::bad_alloc&) {
    row.status = CaseStatus::Failed;
    row.reason = "out of host memory (std::bad_alloc)";
    row.error_kind = ErrorKind::OutOfMemory;
  } catch (const std::exception& error) {
    // Not ours (e.g. std::system_error when no thread can be started): still only this case fails.
    row.status = CaseStatus::Failed;
    row.reason = fmt::format("unexpected error: {}", error.what());
  }
  return row;
}

}  // namespace attnsuite::bench
