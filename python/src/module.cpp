// attnsuite._core: the C++ library seen from Python (nanobind). Arrays cross through DLPack
// without copies (numpy on the CPU; torch, cupy, jax on the GPU); every call goes through the
// same Registry, problem validation and harness (run_sweep) as the CLI. The Python-facing API,
// defaults and docs are in python/attnsuite/__init__.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "bench/plan.hpp"
#include "bench/sweep.hpp"
#include "core/presets.hpp"
#include "report/sinks.hpp"

#if ATTNSUITE_HAVE_CUDA
#include "cuda/common/device_buffer.hpp"
#include "cuda/cuda_backends.hpp"
#endif
#if ATTNSUITE_HAVE_ONNXRUNTIME_PEER
#include "onnxruntime/onnxruntime_peer.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace attnsuite::python {

namespace {

using Array = nb::ndarray<nb::ro>;
using MutableArray = nb::ndarray<>;

// Registry lookups create backends lazily and some backends keep per-call state, so calls into
// backends are serialized (Python threads calling attention() concurrently take turns).
// Recursive: a bench() progress callback may call attention() on the sweep's own thread.
// Always taken with the GIL released (a sweep holding it takes the GIL for its callbacks).
std::recursive_mutex g_backend_mutex;

PyObject* g_unsupported_error = nullptr;

DType dtype_of(const nb::dlpack::dtype& dtype, const char* what) {
  if (dtype == nb::dtype<float>()) return DType::F32;
  if (dtype.bits == 16 && dtype.lanes == 1) {
    if (dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)) return DType::F16;
    if (dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat)) return DType::BF16;
  }
  throw Error(ErrorKind::Usage, fmt::format("{} has dtype code {} with {} bits; allowed: float32, float16, bfloat16",
                                            what, dtype.code, dtype.bits));
}

Device device_of(int device_type, int device_id, const char* what) {
  if (device_type == nb::device::cpu::value) return {DeviceType::Cpu, 0};
  if (device_type == nb::device::cuda::value) return {DeviceType::Cuda, device_id};
  throw Error(ErrorKind::Usage, fmt::format("{} is on DLPack device type {}; allowed: CPU (1), CUDA (2)", what, device_type));
}

Layout parse_layout(std::string_view layout) {
  if (layout == "bshd") return Layout::BSHD;
  if (layout == "bhsd") return Layout::BHSD;
  throw Error(ErrorKind::Usage, fmt::format("layout '{}' is not allowed: bshd or bhsd", layout));
}

// The view of a 4-D array: logical dims are always (batch, seq, heads, dim); BHSD arrays have
// their seq and heads axes swapped in memory, so their strides are swapped into place.
template <class A>
TensorView view_of(const A& array, Layout layout, const char* what) {
  if (array.ndim() != 4)
    throw Error(ErrorKind::Usage, fmt::format("{} has {} dims; attention takes 4-D arrays ({})", what, array.ndim(),
                                              layout == Layout::BSHD ? "batch, seq, heads, dim" : "batch, heads, seq, dim"));
  TensorView view;
  view.data = const_cast<void*>(static_cast<const void*>(array.data()));
  view.dtype = dtype_of(array.dtype(), what);
  view.device = device_of(array.device_type(), array.device_id(), what);
  const int seq_axis = layout == Layout::BSHD ? 1 : 2, head_axis = layout == Layout::BSHD ? 2 : 1;
  const int order[4] = {0, seq_axis, head_axis, 3};
  for (int i = 0; i < 4; ++i) {
    view.shape[i] = static_cast<std::int64_t>(array.shape(order[i]));
    view.strides[i] = array.stride(order[i]);
  }
  return view;
}

struct Call {
  AttentionProblem problem;
  AttentionArgs args;
};

Call make_call(const Array& q, const Array& k, const Array& v, bool causal, std::optional<float> scale,
               std::string_view layout_name, int window_left, int window_right) {
  Call call;
  const Layout layout = parse_layout(layout_name);
  call.args.q = view_of(q, layout, "q");
  call.args.k = view_of(k, layout, "k");
  call.args.v = view_of(v, layout, "v");
  const auto &qv = call.args.q, &kv = call.args.k, &vv = call.args.v;
  ATTNSUITE_REQUIRE(qv.dtype == kv.dtype && qv.dtype == vv.dtype,
                    fmt::format("q, k and v must have one dtype; got {}, {}, {}", to_string(qv.dtype),
                                to_string(kv.dtype), to_string(vv.dtype)));
  ATTNSUITE_REQUIRE(qv.device == kv.device && qv.device == vv.device, "q, k and v must be on one device");
  ATTNSUITE_REQUIRE(kv.shape[0] == qv.shape[0] && vv.shape[0] == qv.shape[0],
                    fmt::format("batch sizes differ: q {}, k {}, v {}", qv.shape[0], kv.shape[0], vv.shape[0]));
  ATTNSUITE_REQUIRE(kv.shape[1] == vv.shape[1] && kv.shape[2] == vv.shape[2],
                    fmt::format("k and v must have the same seq and heads; got k ({}, {}), v ({}, {})", kv.shape[1],
                                kv.shape[2], vv.shape[1], vv.shape[2]));
  ATTNSUITE_REQUIRE(kv.shape[3] == qv.shape[3],
                    fmt::format("q and k head dims differ: {} and {}", qv.shape[3], kv.shape[3]));
  auto& p = call.problem;
  p.batch = static_cast<int>(qv.shape[0]);
  p.seq_q = static_cast<int>(qv.shape[1]);
  p.heads_q = static_cast<int>(qv.shape[2]);
  p.head_dim = static_cast<int>(qv.shape[3]);
  p.seq_kv = static_cast<int>(kv.shape[1]);
  p.heads_kv = static_cast<int>(kv.shape[2]);
  p.head_dim_v = static_cast<int>(vv.shape[3]);
  p.dtype = qv.dtype;
  p.layout = layout;
  p.causal = causal;
  p.window_left = window_left;
  p.window_right = window_right;
  if (scale) {
    ATTNSUITE_REQUIRE(*scale > 0.0f, fmt::format("scale = {} is not allowed: it must be > 0", *scale));
    p.scale = *scale;
  }
  p.validate();
  return call;
}

// The backends "auto" tries, fastest first, per device. Measured: on the 2-core EPYC, cpu-flash
// is 1.2-2.4x cpu-vanilla over the default suite (docs/results/cpu-default-epyc-2core); on the
// H200, cuDNN SDPA runs the headline case in 0.299 ms against flash2's 0.501 ms and
// cuda-vanilla's 3.23 ms (docs/results/h200/headline.md). The first that supports the problem
// and writes into caller memory wins; `reference` is the CPU's last resort.
const std::vector<std::string>& auto_order(DeviceType device) {
  static const std::vector<std::string> cpu{"cpu-flash", "cpu-vanilla", "reference"};
  static const std::vector<std::string> cuda{"cudnn", "flash2", "cuda-vanilla"};
  return device == DeviceType::Cpu ? cpu : cuda;
}

Backend& resolve(std::string_view name, const Call& call) {
  Registry& registry = Registry::global();
  if (name != "auto") {
    Backend& backend = registry.find(name);
    if (backend.device().type != call.args.q.device.type)
      throw Error(ErrorKind::Unsupported, fmt::format("backend '{}' runs on the {}, the arrays are on the {}", name,
                                                      to_string(backend.device().type),
                                                      to_string(call.args.q.device.type)));
    const Support support = backend.supports(call.problem);
    if (!support) throw Error(ErrorKind::Unsupported, fmt::format("backend '{}': {}", name, support.reason));
    return backend;
  }
  std::string reasons;
  for (const auto& candidate : auto_order(call.args.q.device.type)) {
    if (!registry.contains(candidate)) continue;
    Backend& backend = registry.find(candidate);
    const Support support = backend.supports(call.problem);
    if (support && !backend.produces_own_output()) return backend;
    reasons += fmt::format("; {}: {}", candidate, support ? "returns its own output" : support.reason);
  }
  throw Error(ErrorKind::Unsupported, fmt::format("no backend on the {} runs {}{}", to_string(call.args.q.device.type),
                                                  call.problem.describe(), reasons));
}

// Copies a backend's own output into the caller's array (CPU only), row by row through strides.
void copy_output(const AttentionProblem& p, const TensorView& from, const TensorView& to) {
  ATTNSUITE_CHECK(from.device.type == DeviceType::Cpu && to.device.type == DeviceType::Cpu, ErrorKind::Unsupported,
                  "a backend that returns its own output on the GPU cannot write into a caller's array; "
                  "run it through attnsuite.bench()");
  const std::size_t row_bytes = static_cast<std::size_t>(p.dim_v()) * size_of(p.dtype);
  const auto element = static_cast<std::int64_t>(size_of(p.dtype));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t s = 0; s < p.seq_q; ++s)
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        std::memcpy(static_cast<char*>(to.data) + to.offset(b, s, h, 0) * element,
                    static_cast<const char*>(from.data) + from.offset(b, s, h, 0) * element, row_bytes);
}

std::string forward(const std::string& backend_name, const Array& q, const Array& k, const Array& v, MutableArray& o,
                    std::optional<MutableArray>& lse, bool causal, std::optional<float> scale, const std::string& layout,
                    int window_left, int window_right, std::uintptr_t stream) {
  Call call = make_call(q, k, v, causal, scale, layout, window_left, window_right);
  const auto& p = call.problem;
  TensorView out = view_of(o, p.layout, "out");
  ATTNSUITE_REQUIRE(out.dtype == p.dtype && out.device == call.args.q.device,
                    "out must have the dtype and device of q");
  const std::array<std::int64_t, 4> out_shape{p.batch, p.seq_q, p.heads_q, p.dim_v()};
  ATTNSUITE_REQUIRE(out.shape == out_shape, "out must have q's shape with v's head dim");
  ATTNSUITE_REQUIRE(out.strides[3] == 1, "out must be contiguous in its last dim");
  LseView lse_view;
  if (lse) {
    ATTNSUITE_REQUIRE(lse->ndim() == 3 && lse->dtype() == nb::dtype<float>() &&
                          static_cast<int>(lse->shape(0)) == p.batch && static_cast<int>(lse->shape(1)) == p.heads_q &&
                          static_cast<int>(lse->shape(2)) == p.seq_q &&
                          (p.seq_q == 1 || lse->stride(2) == 1) && (p.heads_q == 1 || lse->stride(1) == p.seq_q) &&
                          (p.batch == 1 || lse->stride(0) == static_cast<std::int64_t>(p.heads_q) * p.seq_q),
                      "lse must be a dense float32 array of shape (batch, heads_q, seq_q)");
    lse_view = {static_cast<float*>(lse->data()), call.args.q.device};
  }
  nb::gil_scoped_release release;
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  Backend& backend = resolve(backend_name, call);
  if (backend.produces_own_output()) {
    ATTNSUITE_REQUIRE(lse_view.empty(), fmt::format("backend '{}' computes no log-sum-exp", backend.name()));
    backend.forward(p, call.args, reinterpret_cast<Stream>(stream));
    copy_output(p, backend.produced_output(), out);
  } else {
    call.args.o = out;
    call.args.lse = lse_view;
    // A GPU backend given no workspace allocates its own (the cudnn peer does, on its stream).
    std::unique_ptr<HostBuffer> workspace;
    if (backend.device().type == DeviceType::Cpu) {
      if (const std::size_t bytes = backend.workspace_bytes(p); bytes > 0) {
        workspace = std::make_unique<HostBuffer>(bytes);
        call.args.workspace = workspace->data();
      }
    }
    backend.forward(p, call.args, reinterpret_cast<Stream>(stream));
  }
  return std::string(backend.name());
}

// Times `reps` calls of backend.forward() alone, in C++, on the same arrays: the baseline
// against which the binding's per-call overhead is measured. Returns seconds per call.
double time_forward(const std::string& backend_name, const Array& q, const Array& k, const Array& v, MutableArray& o,
                    bool causal, const std::string& layout, int reps) {
  Call call = make_call(q, k, v, causal, std::nullopt, layout, -1, -1);
  call.args.o = view_of(o, call.problem.layout, "out");
  nb::gil_scoped_release release;
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  Backend& backend = resolve(backend_name, call);
  ATTNSUITE_REQUIRE(!backend.produces_own_output() && backend.workspace_bytes(call.problem) == 0,
                    "time_forward takes backends that write into the caller's output");
  backend.forward(call.problem, call.args, nullptr);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) backend.forward(call.problem, call.args, nullptr);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / std::max(reps, 1);
}

std::string resolve_name(const std::string& backend_name, const Array& q, const Array& k, const Array& v, bool causal,
                         std::optional<float> scale, const std::string& layout, int window_left, int window_right) {
  const Call call = make_call(q, k, v, causal, scale, layout, window_left, window_right);
  nb::gil_scoped_release release;  // always before taking the mutex: a sweep holding it takes the GIL
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  return std::string(resolve(backend_name, call).name());
}

// An uninitialized array the library owns until the last DLPack consumer drops it (an object
// with __dlpack__, which numpy.from_dlpack / jax.dlpack.from_dlpack take): for
// frameworks whose arrays cannot be written (jax), and for CUDA outputs without a framework.
nb::ndarray<nb::array_api> empty(const std::vector<std::size_t>& shape, const std::string& dtype_name, int device_type, int device_id) {
  const auto dtype = parse_dtype(dtype_name);
  ATTNSUITE_REQUIRE(dtype.has_value(), fmt::format("dtype '{}' is not allowed: fp32, fp16, bf16", dtype_name));
  std::size_t count = 1;
  for (auto extent : shape) count *= extent;
  const std::size_t bytes = std::max<std::size_t>(count * size_of(*dtype), 1);
  nb::dlpack::dtype dl{};
  dl.code = static_cast<std::uint8_t>(*dtype == DType::BF16 ? nb::dlpack::dtype_code::Bfloat : nb::dlpack::dtype_code::Float);
  dl.bits = static_cast<std::uint8_t>(size_of(*dtype) * 8);
  dl.lanes = 1;
  void* data = nullptr;
  nb::capsule owner;
  if (device_type == nb::device::cpu::value) {
    auto* buffer = new HostBuffer(bytes);
    data = buffer->data();
    owner = nb::capsule(buffer, [](void* p) noexcept { delete static_cast<HostBuffer*>(p); });
  } else {
#if ATTNSUITE_HAVE_CUDA
    ATTNSUITE_REQUIRE(device_type == nb::device::cuda::value, "empty(): device must be CPU or CUDA");
    cuda::require_cuda_device(device_id);
    auto* buffer = new cuda::DeviceBuffer(bytes);
    data = buffer->data();
    owner = nb::capsule(buffer, [](void* p) noexcept { delete static_cast<cuda::DeviceBuffer*>(p); });
#else
    throw Error(ErrorKind::Unsupported, "this attnsuite was built without CUDA: arrays on a GPU are not supported");
#endif
  }
  return nb::ndarray<nb::array_api>(data, shape.size(), shape.data(), owner, nullptr, dl, device_type, device_id);
}

nb::list backends() {
  std::vector<std::array<std::string, 5>> rows;
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
    Registry& registry = Registry::global();
    for (const auto& name : registry.names()) {
      Backend& backend = registry.find(name);
      rows.push_back({name, std::string(backend.display_name()), std::string(backend.peer_of()),
                      std::string(to_string(backend.device().type)), backend.capabilities()});
    }
  }
  nb::list out;
  for (const auto& row : rows) {
    nb::dict entry;
    entry["name"] = row[0];
    entry["display_name"] = row[1];
    entry["peer_of"] = row[2];
    entry["device"] = row[3];
    entry["capabilities"] = row[4];
    out.append(entry);
  }
  return out;
}

std::string default_suite() {
#if ATTNSUITE_HAVE_CUDA
  if (cuda::cuda_device_count() > 0) return "headline";
#endif
  return "default";
}

// The harness, as `attnsuite bench` runs it: suite (name or path) + overrides (suite keys, as
// JSON text) -> the results files in out_dir and {"header": ..., "rows": [...]} as JSON text.
std::string run_sweep(const std::string& suite, const std::string& overrides_text, const std::string& out_dir,
                      bool resume, bool force, nb::object progress) {
  nlohmann::json suite_json = bench::load_suite_json(suite.empty() ? default_suite() : suite);
  const nlohmann::json overrides = nlohmann::json::parse(overrides_text);
  std::string source = suite.empty() ? default_suite() : suite;
  if (!overrides.empty()) {
    suite_json = bench::merge_suite(std::move(suite_json), overrides);
    source += " + arguments";
  }
  const bench::SweepSpec spec = bench::parse_suite(suite_json, source);
  Registry& registry = Registry::global();
  for (const auto& name : spec.backends) (void)registry.find(name);

  bench::SweepOptions options;
  if (out_dir.empty()) {
    std::string dir = fmt::format("results/{}-{}", spec.name, bench::utc_now_iso8601().substr(0, 19));
    std::replace(dir.begin(), dir.end(), ':', '-');
    options.out_dir = dir;
  } else {
    options.out_dir = out_dir;
  }
  options.resume = resume;
  options.force = force;
  options.suite_json = suite_json;
  bool interrupted = false;
  // Ctrl-C: Python's handler runs here, between samples, and the sweep stops after the case.
  options.cancelled = [&interrupted] {
    if (interrupted) return true;
    nb::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0) {
      PyErr_Clear();
      interrupted = true;
    }
    return interrupted;
  };
  options.on_progress = [&progress](const bench::SweepProgress& p) {
    if (progress.is_none() || p.finished == nullptr) return;
    nb::gil_scoped_acquire acquire;
    const auto& r = *p.finished;
    const std::string result = r.status == bench::CaseStatus::Ok && r.ms_median
                                   ? fmt::format("{:.4g} ms", *r.ms_median)
                                   : fmt::format("{}: {}", bench::to_string(r.status), r.reason);
    progress(p.done, p.total, fmt::format("{} {}: {}", r.backend, report::shape_summary(r), result));
  };
  bench::SweepOutcome outcome;
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
    outcome = bench::run_sweep(spec, options, registry);
  }
  if (interrupted) {
    PyErr_SetString(PyExc_KeyboardInterrupt,
                    fmt::format("sweep interrupted; finish it with attnsuite.bench(..., out='{}', resume=True)",
                                outcome.out_dir.string())
                        .c_str());
    throw nb::python_error();
  }
  nlohmann::ordered_json result;
  result["out_dir"] = outcome.out_dir.string();
  result["header"] = bench::to_json(outcome.header);
  result["rows"] = nlohmann::ordered_json::array();
  for (const auto& row : outcome.rows) result["rows"].push_back(bench::to_ordered_json(row));
  result["warnings"] = outcome.warnings;
  result["summary"] = report::summary_terminal(outcome.rows);
  return result.dump();
}

nb::list model_presets_list() {
  nb::list out;
  for (const auto& m : model_presets()) {
    nb::dict entry;
    entry["name"] = m.name;
    entry["hidden"] = m.hidden;
    entry["heads_q"] = m.heads_q;
    entry["heads_kv"] = m.heads_kv;
    entry["head_dim"] = m.head_dim;
    entry["note"] = m.note;
    out.append(entry);
  }
  return out;
}

}  // namespace

}  // namespace attnsuite::python

NB_MODULE(_core, m) {
  using namespace attnsuite;
  using namespace attnsuite::python;
  m.doc() = "attnsuite's C++ library: backends, problems and the harness (see the attnsuite package)";
  m.attr("__version__") = ATTNSUITE_VERSION;
  m.attr("cuda_build") = static_cast<bool>(ATTNSUITE_HAVE_CUDA);

  g_unsupported_error = PyErr_NewExceptionWithDoc(
      "attnsuite._core.UnsupportedError", "The chosen backend cannot run this problem (the message says why).",
      PyExc_ValueError, nullptr);
  m.attr("UnsupportedError") = nb::handle(g_unsupported_error);
  // attnsuite::Error -> Python: bad input ValueError, an unsupported problem UnsupportedError
  // (a ValueError), out of memory MemoryError, the rest RuntimeError.
  nb::register_exception_translator([](const std::exception_ptr& pointer, void*) {
    try {
      std::rethrow_exception(pointer);
    } catch (const Error& error) {
      PyObject* type = PyExc_RuntimeError;
      if (error.kind() == ErrorKind::Usage) type = PyExc_ValueError;
      if (error.kind() == ErrorKind::Unsupported) type = g_unsupported_error;
      if (error.kind() == ErrorKind::OutOfMemory) type = PyExc_MemoryError;
      PyErr_SetString(type, error.what());
    }
  });

#if ATTNSUITE_HAVE_ONNXRUNTIME_PEER
  onnxruntime::register_onnxruntime_backends(Registry::global());
  m.def("onnxruntime_version", &onnxruntime::onnxruntime_version);
#else
  m.def("onnxruntime_version", [] { return std::string(); });
#endif

  m.def("forward", &forward, "backend"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "causal"_a, "scale"_a.none(),
        "layout"_a, "window_left"_a, "window_right"_a, "stream"_a,
        "Runs one attention forward into `out` (and `lse`); returns the backend's name.");
  m.def("resolve", &resolve_name, "backend"_a, "q"_a, "k"_a, "v"_a, "causal"_a, "scale"_a.none(), "layout"_a,
        "window_left"_a, "window_right"_a, "The backend `backend` (or 'auto') would run for these arrays.");
  m.def("time_forward", &time_forward, "backend"_a, "q"_a, "k"_a, "v"_a, "out"_a, "causal"_a, "layout"_a, "reps"_a,
        "Seconds per backend.forward() call timed in C++ (the baseline of the binding overhead).");
  m.def("empty", &empty, "shape"_a, "dtype"_a, "device_type"_a, "device_id"_a);
  m.def("backends", &backends);
  m.def("model_presets", &model_presets_list);
  m.def("suite_names", &bench::embedded_suite_names);
  m.def("load_suite", [](const std::string& name) { return bench::load_suite_json(name).dump(); });
  m.def("default_suite", &default_suite);
  m.def("run_sweep", &run_sweep, "suite"_a, "overrides"_a, "out_dir"_a, "resume"_a, "force"_a, "progress"_a.none());
}
