// attnsuite._core: the C++ library seen from Python (nanobind). Arrays cross through DLPack
// without copies (numpy on the CPU; torch, cupy, jax on the GPU); every call goes through the
// same Registry, problem validation and harness (run_sweep) as the CLI. The Python-facing API,
// defaults and docs are in python/attnsuite/__init__.py.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "bench/plan.hpp"
#include "bench/profile.hpp"
#include "core/atomic_file.hpp"
#include "core/cancel.hpp"
#include "core/host_info.hpp"
#include "core/presets.hpp"
#include "report/load.hpp"
#include "report/plots.hpp"
#include "report/sinks.hpp"
#include "report/sweep.hpp"
#include "tune/backend_cache.hpp"
#include "tune/tune_run.hpp"

#if ATTNSUITE_HAVE_CUDA
#include "cuda/common/device_buffer.hpp"
#include "cuda/cuda_backends.hpp"
#endif
#if ATTNSUITE_HAVE_ONNXRUNTIME_PEER
#include "peers/onnxruntime/onnxruntime_peer.hpp"
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

// DLPack's code of float8_e4m3fn (kDLFloat8_e4m3fn, DLPack 1.0; torch.float8_e4m3fn exports it):
// by number, so that older nanobind headers without the name build too.
constexpr std::uint8_t kDlpackFloat8E4m3fn = 10;

// A DLPack dtype as numpy / torch name it: "int64", "float64", "complex64", "bool".
std::string dlpack_dtype_name(const nb::dlpack::dtype& dtype) {
  using Code = nb::dlpack::dtype_code;
  std::string kind;
  switch (static_cast<Code>(dtype.code)) {
    case Code::Int:
      kind = "int";
      break;
    case Code::UInt:
      kind = "uint";
      break;
    case Code::Float:
      kind = "float";
      break;
    case Code::Bfloat:
      kind = "bfloat";
      break;
    case Code::Complex:
      kind = "complex";
      break;
    case Code::Bool:
      return "bool";
    case static_cast<Code>(kDlpackFloat8E4m3fn):
      return "float8_e4m3fn";
    default:
      kind = fmt::format("dlpack-code-{}-", dtype.code);
  }
  std::string name = fmt::format("{}{}", kind, dtype.bits);
  if (dtype.lanes != 1) name += fmt::format("x{}", dtype.lanes);
  return name;
}

// uint8_as_e4m3: the caller said dtype="e4m3" (numpy has no float8 type): uint8 arrays hold
// e4m3 bytes.
DType dtype_of(const nb::dlpack::dtype& dtype, const char* what, bool uint8_as_e4m3 = false) {
  if (dtype == nb::dtype<float>()) return DType::F32;
  if (dtype.bits == 16 && dtype.lanes == 1) {
    if (dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)) return DType::F16;
    if (dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat)) return DType::BF16;
  }
  if (dtype.bits == 8 && dtype.lanes == 1) {
    if (dtype.code == kDlpackFloat8E4m3fn) return DType::E4M3;
    if (uint8_as_e4m3 && dtype.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt)) return DType::E4M3;
  }
  throw Error(ErrorKind::Usage,
              fmt::format("{} has dtype {}; allowed: float32, float16, bfloat16, float8_e4m3fn{}", what,
                          dlpack_dtype_name(dtype), uint8_as_e4m3 ? "" : " (or uint8 with dtype=\"e4m3\")"));
}

std::string device_name(const Device& device) {
  return device.type == DeviceType::Cpu ? std::string("cpu") : fmt::format("cuda:{}", device.index);
}

Device device_of(int device_type, int device_id, const char* what) {
  if (device_type == nb::device::cpu::value) return {DeviceType::Cpu, 0};
  if (device_type == nb::device::cuda::value) return {DeviceType::Cuda, device_id};
  throw Error(ErrorKind::Usage,
              fmt::format("{} is on DLPack device type {}; allowed: CPU (1), CUDA (2)", what, device_type));
}

Layout parse_layout(std::string_view layout) {
  if (layout == "bshd") return Layout::BSHD;
  if (layout == "bhsd") return Layout::BHSD;
  throw Error(ErrorKind::Usage, fmt::format("layout '{}' is not allowed: bshd or bhsd", layout));
}

// The view of a 4-D array: logical dims are always (batch, seq, heads, dim); BHSD arrays have
// their seq and heads axes swapped in memory, so their strides are swapped into place.
template <class A>
TensorView view_of(const A& array, Layout layout, const char* what, bool uint8_as_e4m3 = false) {
  if (array.ndim() != 4)
    throw Error(ErrorKind::Usage,
                fmt::format("{} has {} dims; attention takes 4-D arrays ({})", what, array.ndim(),
                            layout == Layout::BSHD ? "batch, seq, heads, dim" : "batch, heads, seq, dim"));
  TensorView view;
  view.data = const_cast<void*>(static_cast<const void*>(array.data()));
  view.dtype = dtype_of(array.dtype(), what, uint8_as_e4m3);
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

// How e4m3 inputs are given: `dtype` "" (the arrays' own dtypes) or "e4m3" (uint8 arrays hold
// e4m3 bytes), and the per-tensor descales of q, k, v (real value = e4m3 × descale), required
// for e4m3 inputs and refused for others.
struct E4m3Inputs {
  std::string dtype;
  std::optional<std::vector<float>> descale;
};

Call make_call(const Array& q, const Array& k, const Array& v, bool causal, std::optional<float> scale,
               std::string_view layout_name, int window_left, int window_right, const E4m3Inputs& e4m3 = {}) {
  Call call;
  const Layout layout = parse_layout(layout_name);
  ATTNSUITE_REQUIRE(e4m3.dtype.empty() || e4m3.dtype == "e4m3",
                    fmt::format("dtype '{}' is not allowed: None (the arrays' own) or \"e4m3\" (uint8 arrays of "
                                "e4m3 bytes)",
                                e4m3.dtype));
  const bool uint8_as_e4m3 = e4m3.dtype == "e4m3";
  call.args.q = view_of(q, layout, "q", uint8_as_e4m3);
  call.args.k = view_of(k, layout, "k", uint8_as_e4m3);
  call.args.v = view_of(v, layout, "v", uint8_as_e4m3);
  auto &qv = call.args.q, &kv = call.args.k, &vv = call.args.v;
  ATTNSUITE_REQUIRE(qv.dtype == kv.dtype && qv.dtype == vv.dtype,
                    fmt::format("q, k and v must have one dtype; got {}, {}, {}", to_string(qv.dtype),
                                to_string(kv.dtype), to_string(vv.dtype)));
  ATTNSUITE_REQUIRE(!uint8_as_e4m3 || qv.dtype == DType::E4M3,
                    fmt::format("dtype=\"e4m3\" takes uint8 or float8_e4m3fn arrays; q is {}", to_string(qv.dtype)));
  if (qv.dtype == DType::E4M3) {
    ATTNSUITE_REQUIRE(e4m3.descale.has_value(),
                      "e4m3 inputs need descale=(dq, dk, dv): the per-tensor factors of q, k, v (real value = e4m3 "
                      "x descale)");
    const std::vector<float>& d = *e4m3.descale;
    ATTNSUITE_REQUIRE(d.size() == 3, fmt::format("descale has {} values; it must be 3: (dq, dk, dv)", d.size()));
    for (float x : d)
      ATTNSUITE_REQUIRE(std::isfinite(x) && x > 0.0f,
                        fmt::format("descale {} is not allowed: each must be finite and > 0", x));
    qv.descale = d[0];
    kv.descale = d[1];
    vv.descale = d[2];
  } else {
    ATTNSUITE_REQUIRE(!e4m3.descale.has_value(),
                      fmt::format("descale is for e4m3 inputs; q, k, v are {}", to_string(qv.dtype)));
  }
  ATTNSUITE_REQUIRE(qv.device == kv.device && qv.device == vv.device,
                    fmt::format("q, k and v must be on one device; got {}, {}, {}", device_name(qv.device),
                                device_name(kv.device), device_name(vv.device)));
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

// The backends "auto" tries when the backend cache has nothing for the problem, fastest first,
// per device. Measured: on the 2-core EPYC, cpu-flash is 1.2-2.4x cpu-vanilla over the default
// suite (docs/results/cpu-default-epyc-2core); on the H200 (docs/results/h200/headline.md),
// cuDNN SDPA runs the headline case in 0.299 ms against flash2's 0.501 ms and cuda-vanilla's
// 3.23 ms, and flash3 v1 runs at 0.73-0.96x cuDNN and 1.07-2.01x flash2. The first that
// supports the problem and writes into caller memory wins; `reference` is the CPU's last resort.
const std::vector<std::string>& auto_order(DeviceType device) {
  static const std::vector<std::string> cpu{"cpu-flash", "cpu-vanilla", "reference"};
  // Our kernels first in a Python process: there PyTorch has loaded its own cuDNN, and the
  // cudnn peer (built against the system's) crashed the interpreter on its first call on the
  // H200 (segmentation fault, torch 2.11, 2026-12-02; not seen in the C++ harness, which also
  // loads libtorch). The backend cache, when there is one, still orders by measured speed.
  static const std::vector<std::string> cuda{"flash3", "flash2", "cudnn", "cuda-vanilla"};
  return device == DeviceType::Cpu ? cpu : cuda;
}

// The backend cache (tune/backend_cache.hpp) as last read; re-read when the file changes (one
// stat per "auto" call). Guarded by g_backend_mutex.
struct BackendCache {
  std::filesystem::path path = tune::default_cache_path();
  bool enabled = true;
  bool loaded = false;
  bool checked = false;  // checked_at is set
  std::chrono::steady_clock::time_point checked_at{};
  std::filesystem::file_time_type mtime{};
  std::uintmax_t size = 0;
  nlohmann::json json;
};
BackendCache g_cache;
// Bumped whenever what "auto" reads may have changed (the file was re-read or went away, another
// file was set): the memo below is only good for the generation it was made in.
std::uint64_t g_cache_generation = 0;

// A stat costs 3-7 us in this sandbox (os.stat in a loop), as much as the whole binding: the
// file is looked at again at most once a second (another process's tune shows up after that; a
// tune in this process and set_backend_cache() reset it at once).
constexpr auto kCacheRecheck = std::chrono::seconds(1);

const nlohmann::json* current_cache() {
  if (!g_cache.enabled) return nullptr;
  const auto now = std::chrono::steady_clock::now();
  if (g_cache.checked && now - g_cache.checked_at < kCacheRecheck) return g_cache.loaded ? &g_cache.json : nullptr;
  g_cache.checked = true;
  g_cache.checked_at = now;
  std::error_code error;
  const auto mtime = std::filesystem::last_write_time(g_cache.path, error);
  const auto size = error ? 0 : std::filesystem::file_size(g_cache.path, error);
  if (error) {
    if (g_cache.loaded) ++g_cache_generation;
    g_cache.loaded = false;
    return nullptr;
  }
  if (!g_cache.loaded || mtime != g_cache.mtime || size != g_cache.size) {
    ++g_cache_generation;
    g_cache.loaded = false;
    g_cache.checked = false;  // a broken file stays an error on every call until it is fixed
    g_cache.json = tune::parse_cache(report::read_text_file(g_cache.path), g_cache.path.string());
    g_cache.checked = true;
    g_cache.loaded = true;
    g_cache.mtime = mtime;
    g_cache.size = size;
  }
  return &g_cache.json;
}

// The machine a device's entries in the cache are keyed by: the GPU's name and driver, or the
// CPU model (what a tune's results header records).
const tune::MachineKey& machine_key(const Device& device) {
  static std::map<int, tune::MachineKey> gpus;
  static const tune::MachineKey cpu{host_info().cpu_model, ""};
  if (device.type == DeviceType::Cpu) return cpu;
  auto found = gpus.find(device.index);
  if (found == gpus.end()) {
#if ATTNSUITE_HAVE_CUDA
    const cuda::CudaDeviceInfo info = cuda::query_cuda_device(device.index);
    found = gpus.emplace(device.index, tune::MachineKey{info.name, info.driver_version}).first;
#else
    found = gpus.emplace(device.index, tune::MachineKey{}).first;
#endif
  }
  return found->second;
}

struct Choice {
  Backend* backend = nullptr;
  std::string source;              // "backend cache PATH (CLASS)", "default order", or "named"
  std::vector<std::string> tried;  // "auto": the candidates in order, with why each was passed over
};

bool same_problem(const AttentionProblem& a, const AttentionProblem& b) {
  return a.batch == b.batch && a.heads_q == b.heads_q && a.heads_kv == b.heads_kv && a.seq_q == b.seq_q &&
         a.seq_kv == b.seq_kv && a.head_dim == b.head_dim && a.head_dim_v == b.head_dim_v && a.dtype == b.dtype &&
         a.layout == b.layout && a.causal == b.causal && a.window_left == b.window_left &&
         a.window_right == b.window_right && a.scale == b.scale;
}

// The last "auto" choice: a model calls attention with one problem many times, and the cache
// lookup (class name, JSON search, each candidate's supports()) costs ~15 us a call on the
// 2-core EPYC against ~1 us for this comparison and the file's stat.
struct AutoMemo {
  bool valid = false;
  std::uint64_t generation = 0;
  AttentionProblem problem;
  Device device;
  Choice choice;
};
AutoMemo g_auto_memo;

Choice choose_uncached(std::string_view name, const Call& call);

Choice choose(std::string_view name, const Call& call) {
  if (name != "auto") return choose_uncached(name, call);
  (void)current_cache();  // re-reads a changed file (a new generation)
  const Device& device = call.args.q.device;
  if (g_auto_memo.valid && g_auto_memo.generation == g_cache_generation && g_auto_memo.device == device &&
      same_problem(g_auto_memo.problem, call.problem)) {
    // The strides are not part of the problem: checked again, as choose_uncached does.
    for (const TensorView* view : {&call.args.q, &call.args.k, &call.args.v})
      if (view->strides[3] != 1) return choose_uncached(name, call);
    return g_auto_memo.choice;
  }
  Choice choice = choose_uncached(name, call);
  g_auto_memo = {true, g_cache_generation, call.problem, device, choice};
  return choice;
}

Choice choose_uncached(std::string_view name, const Call& call) {
  Registry& registry = Registry::global();
  const DeviceType device = call.args.q.device.type;
  if (name != "auto") {
    Backend& backend = registry.find(name);
    if (backend.device().type != device)
      throw Error(ErrorKind::Unsupported, fmt::format("backend '{}' runs on the {}, the arrays are on the {}", name,
                                                      to_string(backend.device().type), to_string(device)));
    const Support support = backend.supports(call.problem);
    if (!support) throw Error(ErrorKind::Unsupported, fmt::format("backend '{}': {}", name, support.reason));
    return {&backend, "named", {}};
  }
  // Only `reference` reads any strides; the kernels need a contiguous last dim. "auto" says so
  // rather than fall back to the slowest backend.
  for (const auto& [what, view] :
       {std::pair<const char*, const TensorView*>{"q", &call.args.q}, {"k", &call.args.k}, {"v", &call.args.v}})
    if (view->strides[3] != 1)
      throw Error(ErrorKind::Usage,
                  fmt::format("{} has stride {} in its last dim; backend \"auto\" needs 1 (a contiguous last dim: "
                              "numpy.ascontiguousarray, tensor.contiguous()); only backend=\"reference\" reads "
                              "other strides",
                              what, view->strides[3]));
  std::vector<std::string> order;
  std::string cache_source;
  if (const nlohmann::json* cache = current_cache()) {
    if (auto cached = tune::cached_order(*cache, machine_key(call.args.q.device), call.problem)) {
      order = std::move(cached->backends);
      cache_source = fmt::format("backend cache {} ({})", g_cache.path.string(), cached->shape_class);
    }
  }
  const std::size_t from_cache = order.size();
  for (const auto& candidate : auto_order(device))
    if (std::find(order.begin(), order.end(), candidate) == order.end()) order.push_back(candidate);
  Choice choice;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::string& candidate = order[i];
    std::string why;
    if (!registry.contains(candidate)) {
      why = "not in this build";
    } else {
      Backend& backend = registry.find(candidate);
      const Support support = backend.supports(call.problem);
      if (backend.device().type != device)
        why = fmt::format("runs on the {}", to_string(backend.device().type));
      else if (!support)
        why = support.reason;
      else if (backend.plan(call.problem, {})->produces_own_output())
        why = "returns its own output";
      if (why.empty()) {
        choice.backend = &backend;
        choice.source = i < from_cache ? cache_source : "default order";
        return choice;
      }
    }
    // Backends the default order names for another build are not worth a line each.
    if (i < from_cache || why != "not in this build") choice.tried.push_back(fmt::format("{}: {}", candidate, why));
  }
  std::string reasons;
  for (const auto& line : choice.tried) reasons += "; " + line;
  throw Error(ErrorKind::Unsupported,
              fmt::format("no backend on the {} runs {}{}", to_string(device), call.problem.describe(), reasons));
}

Backend& resolve(std::string_view name, const Call& call) { return *choose(name, call).backend; }

// Copies a backend's own output into the caller's array (CPU only), row by row through strides.
void copy_output(const AttentionProblem& p, const TensorView& from, const TensorView& to) {
  ATTNSUITE_CHECK(from.device.type == DeviceType::Cpu && to.device.type == DeviceType::Cpu, ErrorKind::Unsupported,
                  "a backend that returns its own output on the GPU cannot write into a caller's array; "
                  "run it through attnsuite.bench()");
  const std::size_t row_bytes = static_cast<std::size_t>(p.dim_v()) * size_of(p.output_dtype());
  const auto element = static_cast<std::int64_t>(size_of(p.output_dtype()));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t s = 0; s < p.seq_q; ++s)
      for (std::int64_t h = 0; h < p.heads_q; ++h)
        std::memcpy(static_cast<char*>(to.data) + to.offset(b, s, h, 0) * element,
                    static_cast<const char*>(from.data) + from.offset(b, s, h, 0) * element, row_bytes);
}

// What a Python call asks of the plan: a kernel config (empty: the backend's choice) and backend
// options, each key one the backend reads (a key it does not read is a usage error naming the
// keys it has, as `bench --backend-option` is for a sweep).
PlanOptions python_plan_options(const Backend& backend, const std::string& kernel_config,
                                const std::map<std::string, std::string>& options) {
  const std::vector<std::string> keys = backend.option_keys();
  for (const auto& [key, value] : options)
    ATTNSUITE_REQUIRE(std::find(keys.begin(), keys.end(), key) != keys.end(),
                      fmt::format("options: backend '{}' takes no option '{}'; it takes: {}", backend.name(), key,
                                  keys.empty() ? std::string("none") : fmt::format("{}", fmt::join(keys, ", "))));
  backend.check_options(options);
  PlanOptions plan_options;
  plan_options.kernel_config = kernel_config;
  plan_options.options = options;
  return plan_options;
}

// A workspace the caller hands in: a 1-D contiguous array on the call's device, e.g. the PyTorch
// drop-in's torch.empty(n, dtype=torch.uint8) from its caching allocator, ordered on the stream
// like any other tensor. Read under the GIL; its size is checked against the plan's need after.
struct GivenWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;
  bool given = false;
};

GivenWorkspace given_workspace(const std::optional<MutableArray>& workspace, const Device& device) {
  if (!workspace) return {};
  const MutableArray& w = *workspace;
  ATTNSUITE_REQUIRE(w.ndim() == 1 && (w.shape(0) <= 1 || w.stride(0) == 1),
                    fmt::format("workspace has {} dims{}; it must be a 1-D contiguous array", w.ndim(),
                                w.ndim() == 1 ? fmt::format(" and stride {}", w.stride(0)) : std::string()));
  const Device where = device_of(w.device_type(), w.device_id(), "workspace");
  ATTNSUITE_REQUIRE(where == device, fmt::format("workspace is on {}; it must be on q's device, {}", device_name(where),
                                                 device_name(device)));
  const auto address = reinterpret_cast<std::uintptr_t>(w.data());
  ATTNSUITE_REQUIRE(address % 256 == 0,
                    fmt::format("workspace starts at an address {} bytes past a 256-byte boundary; it must be "
                                "256-byte aligned (a fresh allocation is)",
                                address % 256));
  return {w.data(), w.nbytes(), true};
}

// The workspace of one run: the caller's when given (nothing allocated or waited for), else a
// buffer of the call's own on the backend's device, which on a GPU is freed only after the stream
// has run (a cudaMalloc, a cudaFree and a host wait per call: what every layer's backward of a
// training step through the drop-in paid before the drop-in handed its own in).
class CallWorkspace {
 public:
  CallWorkspace(const GivenWorkspace& given, std::size_t bytes, DeviceType backend_device) {
    if (given.given) {
      ATTNSUITE_REQUIRE(given.bytes >= bytes,
                        fmt::format("workspace has {} bytes; this call needs {} (workspace_bytes() gives the size)",
                                    given.bytes, bytes));
      data_ = bytes > 0 ? given.data : nullptr;
      return;
    }
    if (bytes == 0) return;
    if (backend_device == DeviceType::Cpu) {
      host_ = std::make_unique<HostBuffer>(bytes);
      data_ = host_->data();
      return;
    }
#if ATTNSUITE_HAVE_CUDA
    device_ = cuda::DeviceBuffer(bytes);
    data_ = device_.data();
#endif
  }
  CallWorkspace(const CallWorkspace&) = delete;
  CallWorkspace& operator=(const CallWorkspace&) = delete;
  void* data() const { return data_; }
  // After the run: the kernels queued on `stream` read a buffer of the call's own until they end.
  void wait_before_free([[maybe_unused]] Stream stream) const {
#if ATTNSUITE_HAVE_CUDA
    if (device_.data() != nullptr) cuda::synchronize_stream(stream);
#endif
  }

 private:
  void* data_ = nullptr;
  std::unique_ptr<HostBuffer> host_;
#if ATTNSUITE_HAVE_CUDA
  cuda::DeviceBuffer device_;
#endif
};

std::string forward(const std::string& backend_name, const Array& q, const Array& k, const Array& v, MutableArray& o,
                    std::optional<MutableArray>& lse, bool causal, std::optional<float> scale,
                    const std::string& layout, int window_left, int window_right, std::uintptr_t stream,
                    const std::string& kernel_config, const std::map<std::string, std::string>& options,
                    const std::string& dtype, const std::optional<std::vector<float>>& descale,
                    const std::optional<MutableArray>& workspace) {
  Call call = make_call(q, k, v, causal, scale, layout, window_left, window_right, {dtype, descale});
  const auto& p = call.problem;
  TensorView out = view_of(o, p.layout, "out");
  const GivenWorkspace given = given_workspace(workspace, call.args.q.device);
  // e4m3 inputs give bf16 O; on the CPU a float32 out takes it widened (exactly): numpy has no
  // bfloat16.
  const bool widen = p.dtype == DType::E4M3 && out.dtype == DType::F32 && out.device.type == DeviceType::Cpu;
  ATTNSUITE_REQUIRE(
      out.dtype == p.output_dtype() || widen,
      p.dtype == DType::E4M3
          ? fmt::format("out has dtype {}; e4m3 inputs give bfloat16 (float32 on the CPU)", to_string(out.dtype))
          : fmt::format("out has dtype {}; it must be q's, {}", to_string(out.dtype), to_string(p.dtype)));
  ATTNSUITE_REQUIRE(out.device == call.args.q.device,
                    fmt::format("out is on {}; it must be on q's device, {}", device_name(out.device),
                                device_name(call.args.q.device)));
  const std::array<std::int64_t, 4> out_shape{p.batch, p.seq_q, p.heads_q, p.dim_v()};
  ATTNSUITE_REQUIRE(out.shape == out_shape,
                    fmt::format("out has (batch, seq, heads, dim) ({}, {}, {}, {}); it must be ({}, {}, {}, {}): "
                                "q's with v's head dim",
                                out.shape[0], out.shape[1], out.shape[2], out.shape[3], out_shape[0], out_shape[1],
                                out_shape[2], out_shape[3]));
  ATTNSUITE_REQUIRE(out.strides[3] == 1,
                    fmt::format("out has stride {} in its last dim; it must be 1 (contiguous)", out.strides[3]));
  LseView lse_view;
  if (lse) {
    ATTNSUITE_REQUIRE(lse->ndim() == 3 && lse->dtype() == nb::dtype<float>() &&
                          static_cast<int>(lse->shape(0)) == p.batch && static_cast<int>(lse->shape(1)) == p.heads_q &&
                          static_cast<int>(lse->shape(2)) == p.seq_q && (p.seq_q == 1 || lse->stride(2) == 1) &&
                          (p.heads_q == 1 || lse->stride(1) == p.seq_q) &&
                          (p.batch == 1 || lse->stride(0) == static_cast<std::int64_t>(p.heads_q) * p.seq_q),
                      "lse must be a dense float32 array of shape (batch, heads_q, seq_q)");
    lse_view = {static_cast<float*>(lse->data()), call.args.q.device};
  }
  nb::gil_scoped_release release;
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  const Backend& backend = resolve(backend_name, call);
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, python_plan_options(backend, kernel_config, options));
  const auto run_stream = reinterpret_cast<Stream>(stream);
  // The bf16 O of a widened call, written into the caller's float32 out after the run.
  std::unique_ptr<HostBuffer> bf16_out;
  const TensorView caller_out = out;
  if (widen) {
    bf16_out = std::make_unique<HostBuffer>(static_cast<std::size_t>(out.numel()) * size_of(DType::BF16));
    out.data = bf16_out->data();
    out.dtype = DType::BF16;
    out.strides = TensorView::dense_strides(out.shape, Layout::BSHD);
  }
  if (plan->produces_own_output()) {
    ATTNSUITE_REQUIRE(lse_view.empty(), fmt::format("backend '{}' computes no log-sum-exp", backend.name()));
    const RunReport report = plan->forward(call.args, run_stream);
    copy_output(p, report.output, out);
  } else {
    call.args.o = out;
    call.args.lse = lse_view;
    // The workspace a plan asks for: flash3-fp8, sage, sage2 and sparge keep their quantized
    // copies or block lists there. (Without it they failed on the H200, 2026-12-02: "FF" in
    // tests/python/test_gpu.py.)
    const CallWorkspace run_workspace(given, plan->workspace_bytes(), backend.device().type);
    call.args.workspace = run_workspace.data();
    plan->forward(call.args, run_stream);
    run_workspace.wait_before_free(run_stream);
  }
  if (widen) {
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t s = 0; s < p.seq_q; ++s)
        for (std::int64_t h = 0; h < p.heads_q; ++h)
          convert_to_float(static_cast<const std::uint16_t*>(out.data) + out.offset(b, s, h, 0), DType::BF16,
                           static_cast<float*>(caller_out.data) + caller_out.offset(b, s, h, 0),
                           static_cast<std::size_t>(p.dim_v()));
  }
  return std::string(backend.name());
}

// The backward of one attention call: dq, dk, dv (arrays like q, k, v) from the forward's inputs,
// its out and lse and the gradient d_out, through backend `backend_name` (a name: the one the
// forward ran, which attention() returns). Returns the backend's name.
std::string backward(const std::string& backend_name, const Array& q, const Array& k, const Array& v, const Array& o,
                     const Array& d_o, const Array& lse, MutableArray& dq, MutableArray& dk, MutableArray& dv,
                     bool causal, std::optional<float> scale, const std::string& layout, int window_left,
                     int window_right, bool deterministic, std::uintptr_t stream, const std::string& kernel_config,
                     const std::map<std::string, std::string>& options, const std::optional<MutableArray>& workspace) {
  ATTNSUITE_REQUIRE(backend_name != "auto",
                    "backward takes the backend the forward ran (attention(..., return_backend=True) "
                    "names it), not \"auto\"");
  Call call = make_call(q, k, v, causal, scale, layout, window_left, window_right);
  const AttentionProblem& p = call.problem;
  BackwardArgs args;
  args.q = call.args.q;
  args.k = call.args.k;
  args.v = call.args.v;
  const std::array<std::int64_t, 4> out_shape{p.batch, p.seq_q, p.heads_q, p.dim_v()};
  const auto like = [&](const TensorView& view, const char* what, const std::array<std::int64_t, 4>& shape) {
    ATTNSUITE_REQUIRE(view.dtype == p.dtype && view.device == call.args.q.device && view.shape == shape,
                      fmt::format("{} must have q's dtype ({}) and device and the shape ({}, {}, {}, {}) (batch, seq, "
                                  "heads, dim)",
                                  what, to_string(p.dtype), shape[0], shape[1], shape[2], shape[3]));
    ATTNSUITE_REQUIRE(view.strides[3] == 1,
                      fmt::format("{} has stride {} in its last dim; it must be 1", what, view.strides[3]));
    return view;
  };
  args.o = like(view_of(o, p.layout, "out"), "out", out_shape);
  args.d_o = like(view_of(d_o, p.layout, "grad_out"), "grad_out", out_shape);
  args.dq = like(view_of(dq, p.layout, "dq"), "dq", args.q.shape);
  args.dk = like(view_of(dk, p.layout, "dk"), "dk", args.k.shape);
  args.dv = like(view_of(dv, p.layout, "dv"), "dv", args.v.shape);
  ATTNSUITE_REQUIRE(lse.ndim() == 3 && lse.dtype() == nb::dtype<float>() && static_cast<int>(lse.shape(0)) == p.batch &&
                        static_cast<int>(lse.shape(1)) == p.heads_q && static_cast<int>(lse.shape(2)) == p.seq_q &&
                        (p.seq_q == 1 || lse.stride(2) == 1) && (p.heads_q == 1 || lse.stride(1) == p.seq_q) &&
                        (p.batch == 1 || lse.stride(0) == static_cast<std::int64_t>(p.heads_q) * p.seq_q),
                    "lse must be the forward's: a dense float32 array of shape (batch, heads_q, seq_q)");
  args.lse = {static_cast<float*>(const_cast<void*>(lse.data())), call.args.q.device};
  const GivenWorkspace given = given_workspace(workspace, call.args.q.device);
  nb::gil_scoped_release release;
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  const Backend& backend = resolve(backend_name, call);
  if (const Support support = backend.supports_backward(p); !support)
    throw Error(ErrorKind::Unsupported, fmt::format("backend '{}': {}", backend.name(), support.reason));
  PlanOptions plan_options = python_plan_options(backend, kernel_config, options);
  plan_options.backward = true;
  plan_options.deterministic = deterministic;
  const std::unique_ptr<KernelPlan> plan = backend.plan(p, plan_options);
  ATTNSUITE_REQUIRE(
      !plan->produces_own_output(),
      fmt::format("backend '{}' returns its own gradients; run it through attnsuite.bench()", backend.name()));
  const auto run_stream = reinterpret_cast<Stream>(stream);
  const CallWorkspace run_workspace(given, plan->backward_workspace_bytes(), backend.device().type);
  args.workspace = run_workspace.data();
  plan->backward(args, run_stream);
  run_workspace.wait_before_free(run_stream);
  return std::string(backend.name());
}

// The backend `backend_name` names (or "auto" picks) for these arrays, and whether it has a
// backward this module can run for their problem: (name, None), or (name, why not). The
// PyTorch drop-in asks before a forward whose inputs need a gradient (it falls back to PyTorch
// when the answer is no). Raises UnsupportedError when the backend cannot run the forward.
nb::tuple resolve_backward(const std::string& backend_name, const Array& q, const Array& k, const Array& v, bool causal,
                           std::optional<float> scale, const std::string& layout, int window_left, int window_right,
                           const std::string& kernel_config, const std::map<std::string, std::string>& options) {
  const Call call = make_call(q, k, v, causal, scale, layout, window_left, window_right);
  std::string name;
  std::optional<std::string> why_not;
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
    const Backend& backend = resolve(backend_name, call);
    name = backend.name();
    if (const Support support = backend.supports_backward(call.problem); !support) {
      why_not = support.reason;
    } else {
      PlanOptions plan_options = python_plan_options(backend, kernel_config, options);
      plan_options.backward = true;
      try {
        if (backend.plan(call.problem, plan_options)->produces_own_output())
          why_not = "it returns its own gradients (attnsuite.bench() runs it)";
      } catch (const Error& error) {
        // What only the plan refuses (flash2's experimental backward without its opt-in option).
        if (error.kind() != ErrorKind::Unsupported) throw;
        why_not = error.what();
      }
    }
  }
  return nb::make_tuple(name, why_not ? nb::cast(*why_not) : nb::none());
}

// The bytes of workspace a forward (or, with `backward`, a backward) of these arrays through
// `backend_name` needs: what the caller hands to forward() / backward() as `workspace` so that the
// call allocates nothing (0: none needed).
std::size_t workspace_bytes(const std::string& backend_name, const Array& q, const Array& k, const Array& v,
                            bool causal, std::optional<float> scale, const std::string& layout, int window_left,
                            int window_right, bool backward, bool deterministic, const std::string& kernel_config,
                            const std::map<std::string, std::string>& options, const std::string& dtype,
                            const std::optional<std::vector<float>>& descale) {
  const Call call = make_call(q, k, v, causal, scale, layout, window_left, window_right, {dtype, descale});
  nb::gil_scoped_release release;
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  const Backend& backend = resolve(backend_name, call);
  PlanOptions plan_options = python_plan_options(backend, kernel_config, options);
  plan_options.backward = backward;
  plan_options.deterministic = deterministic;
  const std::unique_ptr<KernelPlan> plan = backend.plan(call.problem, plan_options);
  if (plan->produces_own_output()) return 0;
  return backward ? plan->backward_workspace_bytes() : plan->workspace_bytes();
}

// Times `reps` calls of backend.forward() alone, in C++, on the same arrays: the baseline
// against which the binding's per-call overhead is measured. Returns seconds per call.
double time_forward(const std::string& backend_name, const Array& q, const Array& k, const Array& v, MutableArray& o,
                    bool causal, const std::string& layout, int reps) {
  Call call = make_call(q, k, v, causal, std::nullopt, layout, -1, -1);
  call.args.o = view_of(o, call.problem.layout, "out");
  nb::gil_scoped_release release;
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  const Backend& backend = resolve(backend_name, call);
  const std::unique_ptr<KernelPlan> plan = backend.plan(call.problem, {});
  ATTNSUITE_REQUIRE(!plan->produces_own_output() && plan->workspace_bytes() == 0,
                    "time_forward takes backends that write into the caller's output");
  plan->forward(call.args, nullptr);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) plan->forward(call.args, nullptr);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / std::max(reps, 1);
}

std::string resolve_name(const std::string& backend_name, const Array& q, const Array& k, const Array& v, bool causal,
                         std::optional<float> scale, const std::string& layout, int window_left, int window_right,
                         const std::string& dtype, const std::optional<std::vector<float>>& descale) {
  const Call call = make_call(q, k, v, causal, scale, layout, window_left, window_right, {dtype, descale});
  nb::gil_scoped_release release;  // always before taking the mutex: a sweep holding it takes the GIL
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  return std::string(resolve(backend_name, call).name());
}

// What "auto" (or a named backend) picks for these arrays, and why: {backend, source, tried}.
nb::dict auto_choice(const std::string& backend_name, const Array& q, const Array& k, const Array& v, bool causal,
                     std::optional<float> scale, const std::string& layout, int window_left, int window_right,
                     const std::string& dtype, const std::optional<std::vector<float>>& descale) {
  const Call call = make_call(q, k, v, causal, scale, layout, window_left, window_right, {dtype, descale});
  Choice choice;
  std::string shape_class;
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
    choice = choose(backend_name, call);
    shape_class = tune::shape_class(call.problem);
  }
  nb::dict out;
  out["backend"] = std::string(choice.backend->name());
  out["source"] = choice.source;
  out["shape_class"] = shape_class;
  nb::list tried;
  for (const auto& line : choice.tried) tried.append(line);
  out["passed_over"] = tried;
  return out;
}

// The backend cache "auto" reads: set (a path; None: tune::default_cache_path(); "": none)
// and get (the path, or None when disabled).
void set_backend_cache(std::optional<std::string> path) {
  nb::gil_scoped_release release;
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  g_cache = BackendCache{};
  ++g_cache_generation;
  if (path) {
    g_cache.enabled = !path->empty();
    if (g_cache.enabled) g_cache.path = *path;
  }
}

std::optional<std::string> backend_cache_path() {
  std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
  if (!g_cache.enabled) return std::nullopt;
  return g_cache.path.string();
}

nb::dict machine_of(int device_type, int device_id) {
  const Device device = device_of(device_type, device_id, "the device");
  tune::MachineKey key;
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
    key = machine_key(device);
  }
  nb::dict out;
  out["device"] = key.device;
  out["driver"] = key.driver;
  return out;
}

std::string default_suite();

// Polls Python's signal handlers from a long C++ run (a sweep, a tune) between samples, and the
// library's cancel flag that RunSignals sets: Ctrl-C stops it within the case in progress.
struct Interrupt {
  bool requested = false;
  bool operator()() {
    if (requested) return true;
    if (cancel_requested()) return requested = true;
    nb::gil_scoped_acquire acquire;
    if (PyErr_CheckSignals() != 0) {
      PyErr_Clear();
      requested = true;
    }
    return requested;
  }
};

// SIGINT and SIGTERM while a sweep or tune runs on the main thread. Both set the library's
// cancel flag, so the loops inside a case (the fp64 reference, the CPU kernels, the timing) stop
// within a fraction of a second, and the run saves what it finished. SIGINT still reaches
// Python's own handler (KeyboardInterrupt, raised once the results are saved). SIGTERM's default
// would kill the process at once and lose the partial results (an empty tune folder, issue
// 27): here it stops the run like SIGINT, and once the results are written the process ends by
// SIGTERM as the sender asked. A SIGTERM that Python handles (signal.signal) or ignores is left
// to it. Not installed off the main thread (signals are the main thread's in Python).
class RunSignals {
 public:
  explicit RunSignals(bool install) {
    if (!install) return;
    clear_cancel();
    g_reraise.store(0);
    for (const int signal_number : {SIGINT, SIGTERM}) {
      struct sigaction current {};
      sigaction(signal_number, nullptr, &current);
      if (current.sa_handler == SIG_IGN && !(current.sa_flags & SA_SIGINFO)) continue;
      // SIGTERM with a handler of Python's: the user's code decides; it runs between samples.
      if (signal_number == SIGTERM && !(current.sa_handler == SIG_DFL && !(current.sa_flags & SA_SIGINFO))) continue;
      previous(signal_number) = current;
      struct sigaction ours {};
      ours.sa_sigaction = on_signal;
      ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
      sigemptyset(&ours.sa_mask);
      sigaction(signal_number, &ours, nullptr);
      installed_.push_back(signal_number);
    }
  }
  ~RunSignals() { finish(); }
  RunSignals(const RunSignals&) = delete;
  RunSignals& operator=(const RunSignals&) = delete;

  // Puts Python's handlers back; after a signal whose action was the default (SIGTERM), ends the
  // process by it now that the results are saved.
  void finish() {
    restore();
    if (const int signal_number = g_reraise.exchange(0); signal_number != 0) raise(signal_number);
  }

 private:
  static struct sigaction& previous(int signal_number) {
    static struct sigaction previous_int {
    }, previous_term{};
    return signal_number == SIGINT ? previous_int : previous_term;
  }
  static void on_signal(int signal_number, siginfo_t* info, void* context) {
    request_cancel();
    const struct sigaction& chained = previous(signal_number);
    if (chained.sa_flags & SA_SIGINFO) {
      if (chained.sa_sigaction != nullptr) chained.sa_sigaction(signal_number, info, context);
    } else if (chained.sa_handler == SIG_DFL) {
      int none = 0;
      g_reraise.compare_exchange_strong(none, signal_number);  // its action, once the results are saved
    } else if (chained.sa_handler != SIG_IGN) {
      chained.sa_handler(signal_number);  // Python's: it raises KeyboardInterrupt at the next check
    }
  }
  void restore() {
    for (const int signal_number : installed_) sigaction(signal_number, &previous(signal_number), nullptr);
    if (!installed_.empty()) clear_cancel();
    installed_.clear();
  }

  static inline std::atomic<int> g_reraise{0};  // a signal whose action was the default
  std::vector<int> installed_;
};

// After a run stopped by a signal: Python's own handler for it may still be pending (the run saw
// the cancel flag first). It runs now: an exception of its own (a user's handler) is raised as it
// is; Python's default, KeyboardInterrupt, is raised with `message` (where the results are).
[[noreturn]] void raise_interrupted(const std::string& message) {
  if (PyErr_CheckSignals() != 0 && !PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) throw nb::python_error();
  PyErr_Clear();
  PyErr_SetString(PyExc_KeyboardInterrupt, message.c_str());
  throw nb::python_error();
}

// `attnsuite tune --batch` from Python: suite (name or path) + overrides (suite keys as JSON
// text), the limits, out_dir, the cache to update (None: none). progress(kind, text): "case",
// "probe", "sweep". Returns {out_dir, document (tune.json), table, warnings, cache_path,
// cache_classes, failed, interrupted} as JSON text.
std::string tune_batch(const std::string& suite, const std::string& overrides_text, int min_batch, int max_batch,
                       std::optional<double> max_memory_gib, std::optional<double> p95_ms, double tolerance,
                       double flat_gain, double time_budget_s, bool exhaustive, std::optional<double> reference_gflop,
                       const std::string& out_dir, bool force, std::optional<std::string> cache_path,
                       nb::object progress, bool handle_signals) {
  tune::TuneOptions options;
  options.limits.min_batch = min_batch;
  options.limits.max_batch = max_batch;
  if (max_memory_gib) options.limits.max_memory_bytes = *max_memory_gib * 1073741824.0;
  options.limits.max_p95_ms = p95_ms;
  options.limits.tolerance = tolerance;
  options.limits.flat_gain = flat_gain;
  options.limits.time_budget_s = time_budget_s;
  options.exhaustive = exhaustive;
  options.reference_gflop = reference_gflop;
  options.out_dir = out_dir;
  options.force = force;
  if (cache_path) options.cache_path = std::filesystem::path(*cache_path);
  auto interrupt = std::make_shared<Interrupt>();
  options.cancelled = [interrupt] { return (*interrupt)(); };
  if (!progress.is_none()) {
    const auto tell = [progress](const char* kind, std::string text) {
      nb::gil_scoped_acquire acquire;
      progress(kind, text);
    };
    options.on_case = [tell](const bench::ResultRow& c) {
      tell("case", fmt::format("{} {}", c.backend, report::shape_summary(c)));
    };
    options.on_probe = [tell](const bench::ResultRow& r) {
      tell("probe", r.status == bench::CaseStatus::Ok && r.tokens_per_s && r.ms_p95
                        ? fmt::format("batch {}: {} tokens/s, p95 {} ms", r.batch, report::format_si(*r.tokens_per_s),
                                      report::format_ms(*r.ms_p95))
                        : fmt::format("batch {}: {}: {}", r.batch, bench::to_string(r.status), r.reason));
    };
    options.on_sweep = [tell] { tell("sweep", "exhaustive sweep"); };
  }
  const std::string source = suite.empty() ? default_suite() : suite;
  nlohmann::json suite_json = bench::load_suite_json(source);
  const nlohmann::json overrides = nlohmann::json::parse(overrides_text);
  if (!overrides.empty()) suite_json = bench::merge_suite(std::move(suite_json), overrides);
  const bench::SweepSpec spec =
      tune::tune_spec(suite_json, overrides.empty() ? source : source + " + arguments", options);
  tune::TuneOutcome outcome;
  RunSignals signals(handle_signals);
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
    outcome = tune::run_batch_tune(spec, options, Registry::global());
    g_cache.checked = false;  // "auto" sees this tune's cache at once
  }
  signals.finish();
  if (interrupt->requested || outcome.interrupted)
    raise_interrupted(fmt::format("tune interrupted; the cases tuned so far are in '{}'", outcome.out_dir.string()));
  nlohmann::ordered_json result;
  result["out_dir"] = outcome.out_dir.string();
  result["document"] = outcome.document;
  result["table"] = outcome.table_terminal;
  result["warnings"] = outcome.warnings;
  result["cache_path"] = outcome.cache_path ? nlohmann::ordered_json(outcome.cache_path->string()) : nullptr;
  result["cache_classes"] = outcome.cache_classes;
  result["failed"] = outcome.failed;
  result["interrupted"] = outcome.interrupted;
  return result.dump();
}

// `attnsuite report FILE --plots DIR` from Python: the results file (.json, .jsonl, .csv or a
// tune.json) loaded, profiled and plotted by src/report/plots.py with `python` (empty: the
// report's search, report::find_plot_python). Returns the plots made.
nb::list plot(const std::string& results_path, const std::string& out_dir, const std::string& python) {
  std::vector<report::PlotFile> files;
  {
    nb::gil_scoped_release release;
    if (!std::filesystem::exists(results_path))
      throw Error(ErrorKind::Usage, fmt::format("results file '{}' does not exist", results_path));
    report::LoadedResults loaded = report::load_results(results_path);
    report::fill_relative_to_vanilla(loaded.rows);
    bench::apply_profile(loaded.rows, loaded.header.ceilings);
    std::string interpreter = python;
    if (interpreter.empty()) {
      std::string why_not;
      const std::optional<std::string> found = report::find_plot_python(&why_not);
      if (!found) throw Error(ErrorKind::Io, why_not);
      interpreter = *found;
    }
    files = report::make_plots(interpreter, report::plot_data(loaded.header, loaded.rows, loaded.tuning), out_dir);
  }
  nb::list out;
  for (const auto& file : files) {
    nb::dict entry;
    entry["name"] = file.name;
    entry["title"] = file.title;
    entry["caption"] = file.caption;
    entry["png"] = file.png.string();
    entry["svg"] = file.svg.string();
    out.append(entry);
  }
  return out;
}

// An uninitialized array the library owns until the last DLPack consumer drops it (an object
// with __dlpack__, which numpy.from_dlpack / jax.dlpack.from_dlpack take): for
// frameworks whose arrays cannot be written (jax), and for CUDA outputs without a framework.
nb::ndarray<nb::array_api> empty(const std::vector<std::size_t>& shape, const std::string& dtype_name, int device_type,
                                 int device_id) {
  const auto dtype = parse_dtype(dtype_name);
  ATTNSUITE_REQUIRE(dtype.has_value(), fmt::format("dtype '{}' is not allowed: {}", dtype_name, kAllowedDTypes));
  std::size_t count = 1;
  for (auto extent : shape) count *= extent;
  const std::size_t bytes = std::max<std::size_t>(count * size_of(*dtype), 1);
  nb::dlpack::dtype dl{};
  dl.code = *dtype == DType::E4M3 ? kDlpackFloat8E4m3fn
                                  : static_cast<std::uint8_t>(*dtype == DType::BF16 ? nb::dlpack::dtype_code::Bfloat
                                                                                    : nb::dlpack::dtype_code::Float);
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
                      bool resume, bool force, nb::object progress, bool handle_signals) {
  nlohmann::json suite_json = bench::load_suite_json(suite.empty() ? default_suite() : suite);
  const nlohmann::json overrides = nlohmann::json::parse(overrides_text);
  std::string source = suite.empty() ? default_suite() : suite;
  if (!overrides.empty()) {
    suite_json = bench::merge_suite(std::move(suite_json), overrides);
    if (suite.empty())
      bench::name_custom_sweep(suite_json, overrides, fmt::format("arguments over the {} suite", source));
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
    if (cancel_requested()) return interrupted = true;
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
  RunSignals signals(handle_signals);
  {
    nb::gil_scoped_release release;
    std::lock_guard<std::recursive_mutex> lock(g_backend_mutex);
    outcome = bench::run_sweep(spec, options, registry);
  }
  signals.finish();
  if (interrupted || outcome.interrupted)
    raise_interrupted(fmt::format("sweep interrupted; finish it with attnsuite.bench(..., out='{}', resume=True)",
                                  outcome.out_dir.string()));
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

  g_unsupported_error = PyErr_NewExceptionWithDoc("attnsuite._core.UnsupportedError",
                                                  "The chosen backend cannot run this problem (the message says why).",
                                                  PyExc_ValueError, nullptr);
  m.attr("UnsupportedError") = nb::handle(g_unsupported_error);
  // attnsuite::Error -> Python: bad input ValueError, an unsupported problem UnsupportedError
  // (a ValueError), out of memory MemoryError, files OSError, the rest RuntimeError.
  nb::register_exception_translator([](const std::exception_ptr& pointer, void*) {
    try {
      std::rethrow_exception(pointer);
    } catch (const Error& error) {
      PyObject* type = PyExc_RuntimeError;
      if (error.kind() == ErrorKind::Usage) type = PyExc_ValueError;
      if (error.kind() == ErrorKind::Unsupported) type = g_unsupported_error;
      if (error.kind() == ErrorKind::OutOfMemory) type = PyExc_MemoryError;
      if (error.kind() == ErrorKind::Io) type = PyExc_OSError;
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
        "layout"_a, "window_left"_a, "window_right"_a, "stream"_a, "kernel_config"_a = std::string(),
        "options"_a = std::map<std::string, std::string>(), "dtype"_a = std::string(), "descale"_a.none() = nb::none(),
        "workspace"_a.none() = nb::none(),
        "Runs one attention forward into `out` (and `lse`); returns the backend's name. dtype \"e4m3\": uint8 "
        "arrays hold e4m3 bytes; descale: (dq, dk, dv) of e4m3 inputs. workspace: a 1-D array on q's device of at "
        "least workspace_bytes() bytes (None: the call allocates its own and, on a GPU, waits for the stream).");
  m.def("backward", &backward, "backend"_a, "q"_a, "k"_a, "v"_a, "out"_a, "grad_out"_a, "lse"_a, "dq"_a, "dk"_a, "dv"_a,
        "causal"_a, "scale"_a.none(), "layout"_a, "window_left"_a, "window_right"_a, "deterministic"_a, "stream"_a,
        "kernel_config"_a = std::string(), "options"_a = std::map<std::string, std::string>(),
        "workspace"_a.none() = nb::none(),
        "Runs one attention backward into dq, dk, dv; returns the backend's name. workspace: as forward()'s, of "
        "workspace_bytes(..., backward=True) bytes.");
  m.def("workspace_bytes", &workspace_bytes, "backend"_a, "q"_a, "k"_a, "v"_a, "causal"_a, "scale"_a.none(), "layout"_a,
        "window_left"_a, "window_right"_a, "backward"_a = false, "deterministic"_a = false,
        "kernel_config"_a = std::string(), "options"_a = std::map<std::string, std::string>(),
        "dtype"_a = std::string(), "descale"_a.none() = nb::none(),
        "The bytes of workspace a forward (backward=True: a backward) of these arrays needs; 0: none.");
  m.def("resolve_backward", &resolve_backward, "backend"_a, "q"_a, "k"_a, "v"_a, "causal"_a, "scale"_a.none(),
        "layout"_a, "window_left"_a, "window_right"_a, "kernel_config"_a = std::string(),
        "options"_a = std::map<std::string, std::string>(),
        "(the backend's name, None) when it has a backward for these arrays, else (name, the reason).");
  m.def("resolve", &resolve_name, "backend"_a, "q"_a, "k"_a, "v"_a, "causal"_a, "scale"_a.none(), "layout"_a,
        "window_left"_a, "window_right"_a, "dtype"_a = std::string(), "descale"_a.none() = nb::none(),
        "The backend `backend` (or 'auto') would run for these arrays.");
  m.def("time_forward", &time_forward, "backend"_a, "q"_a, "k"_a, "v"_a, "out"_a, "causal"_a, "layout"_a, "reps"_a,
        "Seconds per backend.forward() call timed in C++ (the baseline of the binding overhead).");
  m.def("auto_choice", &auto_choice, "backend"_a, "q"_a, "k"_a, "v"_a, "causal"_a, "scale"_a.none(), "layout"_a,
        "window_left"_a, "window_right"_a, "dtype"_a = std::string(), "descale"_a.none() = nb::none(),
        "The backend chosen, where the choice came from, and what was passed over.");
  m.def("set_backend_cache", &set_backend_cache, "path"_a.none(),
        "The backend cache 'auto' reads: a path; None: the default; '': none.");
  m.def("backend_cache_path", &backend_cache_path);
  m.def("default_backend_cache_path", [] { return tune::default_cache_path().string(); });
  m.def("machine", &machine_of, "device_type"_a, "device_id"_a,
        "The machine key of a DLPack device in the backend cache: {device, driver}.");
  m.def("tune_batch", &tune_batch, "suite"_a, "overrides"_a, "min_batch"_a, "max_batch"_a, "max_memory_gib"_a.none(),
        "p95_ms"_a.none(), "tolerance"_a, "flat_gain"_a, "time_budget_s"_a, "exhaustive"_a, "reference_gflop"_a.none(),
        "out_dir"_a, "force"_a, "cache_path"_a.none(), "progress"_a.none(), "handle_signals"_a);
  m.def("plot", &plot, "results_path"_a, "out_dir"_a, "python"_a);
  m.def("empty", &empty, "shape"_a, "dtype"_a, "device_type"_a, "device_id"_a);
  m.def("backends", &backends);
  m.def("model_presets", &model_presets_list);
  m.def("suite_names", &bench::embedded_suite_names);
  m.def("load_suite", [](const std::string& name) { return bench::load_suite_json(name).dump(); });
  m.def("default_suite", &default_suite);
  m.def("run_sweep", &run_sweep, "suite"_a, "overrides"_a, "out_dir"_a, "resume"_a, "force"_a, "progress"_a.none(),
        "handle_signals"_a);
}
