#include "bench/runner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include "attnsuite/error.hpp"
#include "bench/generators.hpp"
#include "core/cancel.hpp"
#include "core/host_info.hpp"
#include "core/parallel.hpp"
#include "core/reference.hpp"

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

// The generator's fp32 values in `dtype` and `layout`. e4m3: quantized per tensor
// (quantize_e4m3: descale = amax / 448), the descale in the view; the reference then reads the
// dequantized values (e4m3 × descale), so that accuracy measures the kernel, not the quantization.
HostTensor make_host_tensor(const std::vector<float>& dense_bshd, std::array<std::int64_t, 4> shape, DType dtype,
                            Layout layout) {
  HostTensor t;
  t.bytes.resize(dense_bshd.size() * size_of(dtype));
  t.view.data = t.bytes.data();
  t.view.dtype = dtype;
  t.view.shape = shape;
  t.view.strides = TensorView::dense_strides(shape, layout);
  if (dtype == DType::E4M3) {
    std::vector<std::uint8_t> dense(dense_bshd.size());
    t.view.descale = quantize_e4m3(dense_bshd.data(), dense.data(), dense.size());
    if (layout == Layout::BSHD) {
      std::memcpy(t.bytes.data(), dense.data(), dense.size());
      return t;
    }
    std::int64_t source = 0;
    for (std::int64_t b = 0; b < shape[0]; ++b)
      for (std::int64_t s = 0; s < shape[1]; ++s)
        for (std::int64_t h = 0; h < shape[2]; ++h, source += shape[3])
          std::memcpy(t.bytes.data() + t.view.offset(b, s, h, 0), dense.data() + source,
                      static_cast<std::size_t>(shape[3]));
    return t;
  }
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

// dO of a backward: standard normal values from the case's seed (a stream of their own, so that
// Q, K and V stay those of the forward's rows).
void fill_gradient(std::vector<float>& values, std::uint64_t seed) {
  std::mt19937_64 engine(seed ^ 0x6772616473ULL);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : values) value = normal(engine);
}

std::size_t output_bytes(const AttentionProblem& p) {
  return static_cast<std::size_t>(p.batch) * p.seq_q * p.heads_q * p.dim_v() * size_of(p.output_dtype());
}
std::size_t lse_bytes(const AttentionProblem& p) {
  return static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * sizeof(float);
}

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
  const double reference =
      rows * (static_cast<double>(p.dim_v()) + 2.0) * sizeof(double) +
      cpu::cpu_threads() * static_cast<double>(p.seq_kv) * (p.head_dim + p.dim_v() + 1) * sizeof(double);
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
  // For the passes with a backward (made on the first such case of the shape): dO, and the fp64
  // gradients of the compared (batch, kv head) slices, as b * heads_kv + kv head, ascending.
  // Per slice: dq holds the group's q heads one after another (group × seq_q × head_dim), dk
  // and dv the kv head's (seq_kv × head_dim, seq_kv × dim_v).
  std::optional<HostTensor> d_o;
  std::vector<std::int64_t> gradient_slices;
  std::vector<double> reference_dq, reference_dk, reference_dv;
};

Runner::Runner(SweepSpec spec, Registry& registry) : spec_(std::move(spec)), registry_(registry) {
  check_backend_options(spec_, registry_);
}

void check_backend_options(const SweepSpec& spec, Registry& registry) {
  for (const auto& name : spec.backends)
    if (registry.contains(name)) {
      const Backend& backend = registry.find(name);
      backend.check_options(options_taken_by(backend, spec.backend_options));
    }
  for (const auto& [key, value] : spec.backend_options) {
    const bool taken = std::ranges::any_of(spec.backends, [&, &key = key](const std::string& name) {
      if (!registry.contains(name)) return false;
      const std::vector<std::string> keys = registry.find(name).option_keys();
      return std::ranges::find(keys, key) != keys.end();
    });
    if (!taken)
      throw Error(
          ErrorKind::Usage,
          fmt::format(
              "backend option '{}' is taken by none of the backends ({}); sparse_config: "
              "sparge, sparge-sage, cpu-sparge; block_mask: block-sparse, cpu-block-sparse; ring_world: cpu-ring; "
              "experimental_backward: flash2; backward_key_tile: flash2; backward_epilogue: flash3; forward_order: "
              "flash3, "
              "flash3-fp8; quant_qk: sage, "
              "sage2",
              key, fmt::join(spec.backends, ", ")));
  }
}

std::map<std::string, std::string> options_taken_by(const Backend& backend,
                                                    const std::map<std::string, std::string>& options) {
  std::map<std::string, std::string> taken;
  for (const std::string& key : backend.option_keys())
    if (const auto found = options.find(key); found != options.end()) taken.insert(*found);
  return taken;
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

ResultRow row_for_case(const Case& c, const Backend* backend) {
  ResultRow row;
  const auto& p = c.problem;
  row.backend = c.backend;
  row.kernel_config = c.kernel_config;
  if (backend != nullptr) {
    row.display_name = std::string(backend->display_name());
    row.peer_of = std::string(backend->peer_of());
    row.device = device_string(backend->device());
    for (const auto& [key, value] : options_taken_by(*backend, c.backend_options))
      row.backend_options += fmt::format("{}{}={}", row.backend_options.empty() ? "" : ";", key, value);
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
  row.pass = std::string(to_string(c.pass));
  return row;
}

const Runner::Prepared& Runner::prepare(const Case& c) {
  ResultRow probe = row_for_case(c, nullptr);
  probe.pass = "fwd";  // every pass of a shape runs on the same inputs
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
    cpu::parallel_for(
        static_cast<std::int64_t>(prepared->rows.size()), cpu::cpu_threads(), [&](std::int64_t item, int) {
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
          row_args.q.data =
              static_cast<unsigned char*>(args.q.data) + i * args.q.strides[1] * static_cast<std::int64_t>(element);
          row_args.q.shape[1] = 1;
          row_args.k.shape[1] = end;
          row_args.v.shape[1] = end;
          cpu::reference_head_f64(row_problem, row_args, b, h, out, prepared->reference_lse.data() + n);
        });
  }
  prepared_ = std::move(prepared);
  return *prepared_;
}

// Refuses what cannot fit before anything is allocated, the inputs and the reference included:
// Linux overcommits, so an allocation too large "succeeds" and the process is killed later.
void Runner::check_fits(const Case& c, const Backend& backend, const KernelPlan& plan, DeviceContext& ctx) {
  const auto& p = c.problem;
  const TensorSizes n(p);
  const double output = static_cast<double>(output_bytes(p) + lse_bytes(p));
  double on_device =
      (n.q + n.k + n.v) * static_cast<double>(size_of(p.dtype)) + output + static_cast<double>(plan.workspace_bytes());
  // A backward: dO and dQ, dK, dV beside them, its workspace, and on the host dO and the
  // gradients read back.
  const double backward = c.pass == Pass::Forward ? 0.0
                                                  : (n.q + n.k + n.v) * static_cast<double>(size_of(p.dtype)) +
                                                        static_cast<double>(output_bytes(p));
  on_device += backward + (c.pass == Pass::Forward ? 0.0 : static_cast<double>(plan.backward_workspace_bytes()));
  ResultRow probe = row_for_case(c, nullptr);
  probe.pass = "fwd";
  const bool prepared = prepared_ && prepared_->shape_key == probe.shape_key();
  // The output is read back into a host copy of its own.
  double on_host = (prepared ? 0.0 : prepare_host_bytes(p, spec_.reference_gflop)) + output + backward;
  const bool host_device = backend.device().type == DeviceType::Cpu;
  if (host_device) on_host += on_device;
  const double host_free = static_cast<double>(host_info().available_memory_bytes());
  if (host_free > 0 && on_host > host_free)
    throw Error(
        ErrorKind::OutOfMemory,
        fmt::format("out of memory: the case needs {:.2f} GiB of host memory{}, {:.2f} GiB free", on_host / kGiB,
                    host_device ? "" : " (inputs, fp64 reference, output copy)", host_free / kGiB));
  if (host_device) return;
  const double device_free = static_cast<double>(ctx.free_bytes());
  if (device_free > 0 && on_device > device_free)
    throw Error(ErrorKind::OutOfMemory, fmt::format("out of memory: the case needs {:.2f} GiB on {}, {:.2f} GiB free",
                                                    on_device / kGiB, device_string(ctx.device()), device_free / kGiB));
}

// Q, K, V on the backend's device. Inputs are generated where they are used (a GPU fills its
// own, bitwise equal to the host's copy that the reference read); devices that cannot get the
// host copy.
Runner::DeviceInputs Runner::upload(DeviceContext& ctx, const Prepared& in, const Case& c) {
  DeviceInputs inputs;
  const Device device = ctx.device();
  const AttentionProblem& p = c.problem;
  const GeneratorInfo& generator = find_generator(c.generator);
  std::uint64_t tensor_index = 0;
  for (auto [view, host, buffer] :
       {std::tuple{&inputs.args.q, &in.q, &inputs.q}, std::tuple{&inputs.args.k, &in.k, &inputs.k},
        std::tuple{&inputs.args.v, &in.v, &inputs.v}}) {
    *buffer = ctx.allocate(host->bytes.size());
    *view = host->view;
    view->data = (*buffer)->data();
    view->device = device;
    // e4m3 inputs are quantized with the amax of the whole tensor: the host's copy is uploaded.
    const bool generated =
        generator.device_kind && p.dtype != DType::E4M3 &&
        ctx.generate(*view, *generator.device_kind, genmath::tensor_key(*generator.device_kind, c.seed, tensor_index));
    if (!generated) ctx.copy_to_device(view->data, host->bytes.data(), host->bytes.size());
    ++tensor_index;
  }
  return inputs;
}

// O and the LSE (poisoned: an element a backend never writes fails the check) and the
// workspace, unless the plan returns its own output.
void Runner::prepare_outputs(DeviceContext& ctx, const KernelPlan& plan, const AttentionProblem& p,
                             DeviceInputs& inputs) {
  AttentionArgs& args = inputs.args;
  if (!plan.produces_own_output()) {
    inputs.o = ctx.allocate(output_bytes(p));
    inputs.lse = ctx.allocate(lse_bytes(p));
    ctx.poison(inputs.o->data(), output_bytes(p));
    ctx.poison(inputs.lse->data(), lse_bytes(p));
    args.o.data = inputs.o->data();
    args.o.dtype = p.output_dtype();
    args.o.device = ctx.device();
    args.o.shape = {p.batch, p.seq_q, p.heads_q, p.dim_v()};
    args.o.strides = TensorView::dense_strides(args.o.shape, p.layout);
    args.lse = {static_cast<float*>(inputs.lse->data()), ctx.device()};
  }
  if (plan.workspace_bytes() > 0) {
    inputs.workspace = ctx.allocate(plan.workspace_bytes());
    args.workspace = inputs.workspace->data();
  }
}

// The accuracy run, with the peak extra memory measured around it: everything allocated for the
// forward beyond the inputs Q, K, V — the output and LSE included, as PyTorch's allocator
// statistics count them for the peers. Fills the memory, sparsity and accuracy columns; false
// when the output holds NaN/Inf (the row has failed).
bool Runner::check_accuracy(DeviceContext& ctx, KernelPlan& plan, const Prepared& in, DeviceInputs& inputs,
                            ResultRow& row) {
  const AttentionProblem& p = in.problem;
  ctx.synchronize();
  ctx.reset_peak_memory();
  const std::optional<std::size_t> used_before = ctx.used_bytes();
  AttentionArgs& args = inputs.args;
  prepare_outputs(ctx, plan, p, inputs);
  const RunReport report = plan.forward(args, ctx.stream());
  ctx.synchronize();
  row.peak_mem_mib = static_cast<double>(ctx.peak_memory_since_reset() + report.own_peak_memory_bytes) / 1048576.0;
  if (const std::optional<std::size_t> used_after = ctx.used_bytes(); used_before && used_after)
    row.mem_reserved_mib = static_cast<double>(*used_after > *used_before ? *used_after - *used_before : 0) / 1048576.0;
  if (const std::optional<RunReport::Sparse> sparse = report.sparse_stats()) {
    row.sparsity = sparse->achieved_sparsity;
    row.predicted_sparsity = sparse->predicted_sparsity;
    row.predictor_ms = sparse->predictor_ms;
  }
  const TensorView result = plan.produces_own_output() ? report.output : args.o;
  const LseView result_lse = plan.produces_own_output() ? report.output_lse : args.lse;
  const std::array<std::int64_t, 4> o_shape{p.batch, p.seq_q, p.heads_q, p.dim_v()};
  ATTNSUITE_CHECK(!result.empty() && result.dtype == p.output_dtype() && result.shape == o_shape, ErrorKind::Internal,
                  fmt::format("backend '{}' produced no output of the expected dtype and shape", row.backend));
  // Reads the output through its strides: copy the span it covers, then index.
  std::int64_t span = 1;
  for (int dim = 0; dim < 4; ++dim) span += (result.shape[dim] - 1) * result.strides[dim];
  std::vector<unsigned char> host_o(static_cast<std::size_t>(span) * size_of(p.output_dtype()));
  ctx.copy_to_host(host_o.data(), result.data, host_o.size());
  std::vector<float> host_lse;
  if (!result_lse.empty()) {
    host_lse.resize(lse_bytes(p) / sizeof(float));
    ctx.copy_to_host(host_lse.data(), result_lse.data, lse_bytes(p));
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
      accuracy.add(load_as_float(host_o.data(), p.output_dtype(), result.offset(b, s, h, d)), ref[d]);
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
    return false;
  }
  if (lse_mismatches > 0) row.reason = fmt::format("log-sum-exp differs from the reference in {} rows", lse_mismatches);
  return true;
}

// Times the plan's runs until the noise target or the budget; fills the timing columns. False
// when cancelled mid-way.
bool Runner::time_case(DeviceContext& ctx, KernelPlan& plan, const AttentionProblem& p, DeviceInputs& inputs, Pass pass,
                       const std::function<bool()>& cancelled, ResultRow& row) {
  // One run of the pass. fwd+bwd hands the backward the forward's own output where the plan
  // returns one (its O and LSE are then the plan's, not ours).
  auto run_pass = [&]() -> RunReport {
    if (pass == Pass::Backward) return plan.backward(inputs.backward, ctx.stream());
    RunReport forward = plan.forward(inputs.args, ctx.stream());
    if (pass == Pass::Forward) return forward;
    if (plan.produces_own_output()) {
      inputs.backward.o = forward.output;
      inputs.backward.lse = forward.output_lse;
    }
    return plan.backward(inputs.backward, ctx.stream());
  };
  const double clock_start = ctx.clock_mhz();
  auto timer = ctx.make_timer();
  // The predictor's time of each timed forward (read after the sample's own synchronization,
  // outside its timed span): the row gives their median, as ms_median is. The accuracy run's
  // figure is a cold, lone call — on the H200 after the fp64 reference it read 1.14 ms where the
  // timed forwards' whole median was 0.91 ms (sparge, banded, N 16k, 2026-12-04).
  std::vector<double> predictor_samples;
  auto sample = [&] {
    if (spec_.timing.cold) ctx.flush_cache();
    timer->start();
    const RunReport report = run_pass();
    timer->stop();
    const double ms = timer->elapsed_ms();
    if (row.predictor_ms)  // a sparse row: its statistics, read after the timer's own synchronization
      if (const auto sparse = report.sparse_stats(); sparse && sparse->predictor_ms)
        predictor_samples.push_back(*sparse->predictor_ms);
    return ms;
  };
  std::unique_ptr<PeriodicSampler> sampler = ctx.start_sampling();
  const Measurement m = measure(
      [&] {
        run_pass();
        ctx.synchronize();
      },
      sample, spec_.timing.measure, cancelled);
  const SampleSummary samples = sampler ? sampler->stop() : SampleSummary{};
  if (cancel_requested() || (cancelled && cancelled())) return false;
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
  const double flops = p.flops() * flops_factor(pass);
  row.tflops = flops / seconds * 1e-12;
  if (row.sparsity) row.effective_tflops = flops * (1.0 - *row.sparsity) / seconds * 1e-12;
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
  return true;
}

// dO and the fp64 reference gradients of the shape, on the first case with a backward. The
// reference covers whole (batch, kv head) slices — a key's dK and dV sum over every query of its
// group — evenly spaced, as many as the GFLOP budget pays for (2.5× a slice's forward), at least one.
void Runner::prepare_gradients(Prepared& in, const Case& c) {
  if (in.d_o) return;
  const AttentionProblem& p = in.problem;
  const std::array<std::int64_t, 4> o_shape{p.batch, p.seq_q, p.heads_q, p.dim_v()};
  std::vector<float> d_o(static_cast<std::size_t>(o_shape[0] * o_shape[1] * o_shape[2] * o_shape[3]));
  fill_gradient(d_o, c.seed);
  in.d_o = make_host_tensor(d_o, o_shape, p.dtype, p.layout);

  const std::int64_t slices = static_cast<std::int64_t>(p.batch) * p.heads_kv;
  const double slice_gflop = 2.5 * p.flops() * 1e-9 / static_cast<double>(slices);
  const std::int64_t count = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(spec_.reference_gflop / std::max(slice_gflop, 1e-12)), 1, slices);
  for (std::int64_t i = 0; i < count; ++i)
    in.gradient_slices.push_back(count == 1 ? 0 : i * (slices - 1) / (count - 1));
  const std::size_t group = static_cast<std::size_t>(p.group_size());
  const std::size_t dq_size = group * p.seq_q * p.head_dim, dk_size = static_cast<std::size_t>(p.seq_kv) * p.head_dim,
                    dv_size = static_cast<std::size_t>(p.seq_kv) * p.dim_v();
  in.reference_dq.resize(in.gradient_slices.size() * dq_size);
  in.reference_dk.resize(in.gradient_slices.size() * dk_size);
  in.reference_dv.resize(in.gradient_slices.size() * dv_size);
  BackwardArgs args;
  args.q = in.q.view;
  args.k = in.k.view;
  args.v = in.v.view;
  args.d_o = in.d_o->view;
  // Fewer slices than threads (one N = 16k slice took ~30 s on one thread of the H100 machine):
  // the slices one after another, each over every thread.
  const auto slice_count = static_cast<std::int64_t>(in.gradient_slices.size());
  const int threads = cpu::cpu_threads();
  const bool within = slice_count < threads;
  cpu::parallel_for(slice_count, within ? 1 : threads, [&](std::int64_t n, int) {
    const std::int64_t slice = in.gradient_slices[static_cast<std::size_t>(n)];
    const auto at = static_cast<std::size_t>(n);
    cpu::reference_backward_kv_head_f64(p, args, static_cast<int>(slice / p.heads_kv),
                                        static_cast<int>(slice % p.heads_kv), in.reference_dq.data() + at * dq_size,
                                        in.reference_dk.data() + at * dk_size, in.reference_dv.data() + at * dv_size,
                                        within ? threads : 1);
  });
}

// The backward's accuracy run: the plan's forward gives O and the LSE, its backward dQ, dK and dV
// (poisoned before), compared with the fp64 reference on the compared slices. The peak memory is
// what the pass allocates beyond its inputs: for bwd beyond Q, K, V, O, LSE and dO; for fwd+bwd
// beyond Q, K, V and dO. False when a gradient holds NaN/Inf (the row has failed).
bool Runner::check_gradients(DeviceContext& ctx, KernelPlan& plan, const Prepared& in, DeviceInputs& inputs, Pass pass,
                             ResultRow& row) {
  const AttentionProblem& p = in.problem;
  const Device device = ctx.device();
  auto allocate_like = [&](std::unique_ptr<DeviceAllocation>& buffer, const TensorView& like, bool poisoned) {
    const std::size_t bytes = static_cast<std::size_t>(like.numel()) * size_of(p.dtype);
    buffer = ctx.allocate(bytes);
    if (poisoned) ctx.poison(buffer->data(), bytes);
    TensorView view = like;
    view.data = buffer->data();
    view.device = device;
    view.strides = TensorView::dense_strides(view.shape, p.layout);
    return view;
  };
  BackwardArgs& args = inputs.backward;
  args.q = inputs.args.q;
  args.k = inputs.args.k;
  args.v = inputs.args.v;
  args.d_o = allocate_like(inputs.d_o, in.d_o->view, false);
  ctx.copy_to_device(args.d_o.data, in.d_o->bytes.data(), in.d_o->bytes.size());
  ctx.synchronize();
  if (pass == Pass::ForwardBackward) ctx.reset_peak_memory();
  const std::optional<std::size_t> used_before = ctx.used_bytes();
  prepare_outputs(ctx, plan, p, inputs);
  RunReport forward = plan.forward(inputs.args, ctx.stream());
  args.o = plan.produces_own_output() ? forward.output : inputs.args.o;
  args.lse = plan.produces_own_output() ? forward.output_lse : inputs.args.lse;
  ctx.synchronize();
  if (pass == Pass::Backward) ctx.reset_peak_memory();
  if (!plan.produces_own_output()) {
    args.dq = allocate_like(inputs.dq, inputs.args.q, true);
    args.dk = allocate_like(inputs.dk, inputs.args.k, true);
    args.dv = allocate_like(inputs.dv, inputs.args.v, true);
  }
  if (plan.backward_workspace_bytes() > 0) {
    inputs.backward_workspace = ctx.allocate(plan.backward_workspace_bytes());
    args.workspace = inputs.backward_workspace->data();
  }
  const RunReport report = plan.backward(args, ctx.stream());
  ctx.synchronize();
  row.peak_mem_mib = static_cast<double>(ctx.peak_memory_since_reset() + report.own_peak_memory_bytes +
                                         (pass == Pass::ForwardBackward ? forward.own_peak_memory_bytes : 0)) /
                     1048576.0;
  if (const std::optional<std::size_t> used_after = ctx.used_bytes(); used_before && used_after)
    row.mem_reserved_mib = static_cast<double>(*used_after > *used_before ? *used_after - *used_before : 0) / 1048576.0;

  const bool own = plan.produces_own_output();
  const TensorView got[3] = {own ? report.output_dq : args.dq, own ? report.output_dk : args.dk,
                             own ? report.output_dv : args.dv};
  const std::vector<double>* reference[3] = {&in.reference_dq, &in.reference_dk, &in.reference_dv};
  const char* names[3] = {"dQ", "dK", "dV"};
  const int group = p.group_size();
  AccuracyStats stats[3];
  for (int g = 0; g < 3; ++g) {
    const TensorView& view = got[g];
    ATTNSUITE_CHECK(!view.empty() && view.dtype == p.dtype, ErrorKind::Internal,
                    fmt::format("backend '{}' produced no {} of the expected dtype", row.backend, names[g]));
    std::int64_t span = 1;
    for (int dim = 0; dim < 4; ++dim) span += (view.shape[dim] - 1) * view.strides[dim];
    std::vector<unsigned char> host(static_cast<std::size_t>(span) * size_of(p.dtype));
    ctx.copy_to_host(host.data(), view.data, host.size());
    AccuracyAccumulator accuracy;
    const std::int64_t dim = view.shape[3];
    const std::size_t per_slice = reference[g]->size() / in.gradient_slices.size();
    for (std::size_t n = 0; n < in.gradient_slices.size(); ++n) {
      const int b = static_cast<int>(in.gradient_slices[n] / p.heads_kv),
                kv = static_cast<int>(in.gradient_slices[n] % p.heads_kv);
      const double* ref = reference[g]->data() + n * per_slice;
      // dQ: the group's q heads in order; dK, dV: the kv head.
      const int heads = g == 0 ? group : 1;
      const std::int64_t seq = view.shape[1];
      for (int j = 0; j < heads; ++j) {
        const int h = g == 0 ? kv * group + j : kv;
        for (std::int64_t s = 0; s < seq; ++s)
          for (std::int64_t d = 0; d < dim; ++d)
            accuracy.add(load_as_float(host.data(), p.dtype, view.offset(b, s, h, d)), ref[(j * seq + s) * dim + d]);
      }
    }
    stats[g] = accuracy.finish();
    if (stats[g].non_finite > 0) {
      row.status = CaseStatus::Failed;
      row.reason = fmt::format("{} has {} NaN/Inf values among the compared elements", names[g], stats[g].non_finite);
    }
  }
  std::optional<double>* columns[3][4] = {{&row.dq_max_abs_err, &row.dq_rel_l2, &row.dq_rel_l1, &row.dq_cos_sim},
                                          {&row.dk_max_abs_err, &row.dk_rel_l2, &row.dk_rel_l1, &row.dk_cos_sim},
                                          {&row.dv_max_abs_err, &row.dv_rel_l2, &row.dv_rel_l1, &row.dv_cos_sim}};
  for (int g = 0; g < 3; ++g) {
    *columns[g][0] = stats[g].max_abs_err;
    *columns[g][1] = stats[g].rel_l2;
    *columns[g][2] = stats[g].rel_l1;
    *columns[g][3] = stats[g].cos_sim;
    row.max_abs_err = std::max(row.max_abs_err.value_or(0.0), stats[g].max_abs_err);
    row.rel_l2 = std::max(row.rel_l2.value_or(0.0), stats[g].rel_l2);
    row.rel_l1 = std::max(row.rel_l1.value_or(0.0), stats[g].rel_l1);
    row.rmse = std::max(row.rmse.value_or(0.0), stats[g].rmse);
    row.cos_sim = std::min(row.cos_sim.value_or(1.0), stats[g].cos_sim);
  }
  row.accuracy_fraction = static_cast<double>(in.gradient_slices.size()) / (static_cast<double>(p.batch) * p.heads_kv);
  return row.status != CaseStatus::Failed;
}

PlanOptions Runner::plan_options(const Case& c, const Backend& backend) const {
  PlanOptions options;
  options.kernel_config = c.kernel_config;
  options.options = options_taken_by(backend, c.backend_options);
  options.backward = c.pass != Pass::Forward;
  if (backend.device().type == DeviceType::Cuda) options.cuda_device = device_of(backend).index;
  return options;
}

std::optional<ResultRow> Runner::run(const Case& c, const std::function<bool()>& cancelled) {
  // The reference's rows, the CPU kernels' work items and the timing loop stop on a cancel
  // request (SIGINT, SIGTERM) within the case, not after it (core/cancel.hpp).
  const CancellableScope cancellable;
  ResultRow row = row_for_case(c, nullptr);
  const auto skip = [&](std::string reason) {
    row.status = CaseStatus::Skipped;
    row.reason = std::move(reason);
    return row;
  };
  const auto fail = [&](std::string reason, std::optional<ErrorKind> kind) {
    row.status = CaseStatus::Failed;
    row.reason = std::move(reason);
    row.error_kind = kind;
    return row;
  };
  try {
    const Backend& backend = registry_.find(c.backend);
    row = row_for_case(c, &backend);
    row.device = device_string(device_of(backend));
    if (!c.invalid_reason.empty()) return skip(c.invalid_reason);
    if (const Support support = backend.supports(c.problem); !support) return skip(support.reason);
    if (c.pass != Pass::Forward)
      if (const Support support = backend.supports_backward(c.problem); !support) return skip(support.reason);
    std::unique_ptr<KernelPlan> plan;
    try {
      plan = backend.plan(c.problem, plan_options(c, backend));
    } catch (const Error& error) {
      if (error.kind() != ErrorKind::Unsupported) throw;
      return skip(error.what());  // what only the options rule out (a sparse config for other heads)
    }
    row.kernel_config = std::string(plan->kernel_config());
    row.work_order = std::string(plan->work_order());
    DeviceContext& ctx = context_for(device_of(backend));
    row.gpu = ctx.device_name();
    check_fits(c, backend, *plan, ctx);
    const Prepared& in = prepare(c);
    DeviceInputs inputs = upload(ctx, in, c);
    if (c.pass == Pass::Forward) {
      if (!check_accuracy(ctx, *plan, in, inputs, row)) return row;
    } else {
      prepare_gradients(*prepared_, c);
      if (!check_gradients(ctx, *plan, in, inputs, c.pass, row)) return row;
    }
    if (!time_case(ctx, *plan, c.problem, inputs, c.pass, cancelled, row)) return std::nullopt;
  } catch (const Error& error) {
    if (error.kind() == ErrorKind::Cancelled) return std::nullopt;  // unfinished: not recorded
    return fail(error.what(), error.kind());
  } catch (const std::bad_alloc&) {
    return fail("out of host memory (std::bad_alloc)", ErrorKind::OutOfMemory);
  } catch (const std::exception& error) {
    // Not ours (e.g. std::system_error when no thread can be started): still only this case fails.
    return fail(fmt::format("unexpected error: {}", error.what()), std::nullopt);
  }
  return row;
}

}  // namespace attnsuite::bench
