// The ONNX Runtime peers. Each shape gets its own model and InferenceSession (made on the first
// forward of that shape, outside the timed runs); the inputs and the output are bound by pointer,
// so a timed forward() is one Python call, session.run_with_iobinding(), on the harness's buffers.
//
// Why Python: the PyPI onnxruntime wheel ships libonnxruntime.so but not the C API headers, and
// Debian 12 packages no ONNX Runtime; its Python API is what an installed onnxruntime offers.
// The call costs a few microseconds against the milliseconds of the cases it runs.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "attnsuite/error.hpp"
#include "core/parallel.hpp"
#include "peers/onnxruntime/embedded_python.hpp"
#include "peers/onnxruntime/onnxruntime_peer.hpp"

#if ATTNSUITE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace attnsuite::onnxruntime {

namespace {

enum class Form { Attention, Decomposed };

// A value from /proc/self/status in bytes ("VmRSS", "VmHWM"); 0 when unreadable.
std::size_t status_bytes(std::string_view key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() && line[key.size()] == ':')
      return static_cast<std::size_t>(std::stoull(line.substr(key.size() + 1))) * 1024;
  }
  return 0;
}

// Resets the process's resident high-water mark (VmHWM) to the current RSS; false where the
// kernel does not allow it.
bool reset_resident_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

// The output ONNX Runtime writes, allocated outside the harness's tracker: the peer reports its
// own peak (output included) by measuring around the forward, as the PyTorch peers do through
// their allocator. On the CPU fresh anonymous pages, so they become resident only when ONNX
// Runtime writes them, inside the measured forward.
class OutputBuffer {
 public:
  OutputBuffer() = default;
  OutputBuffer(std::size_t bytes, DeviceType device) : bytes_(bytes), device_(device) {
    if (device == DeviceType::Cpu) {
      void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mapped == MAP_FAILED)
        throw Error(ErrorKind::OutOfMemory, fmt::format("onnxruntime: cannot map {} bytes for the output", bytes));
      data_ = mapped;
    } else {
#if ATTNSUITE_HAVE_CUDA
      if (cudaMalloc(&data_, bytes) != cudaSuccess) {
        cudaGetLastError();
        throw Error(ErrorKind::OutOfMemory,
                    fmt::format("onnxruntime: cudaMalloc of {} bytes for the output failed", bytes));
      }
#else
      throw Error(ErrorKind::Unsupported, "onnxruntime: this build has no CUDA");
#endif
    }
  }
  ~OutputBuffer() { release(); }
  OutputBuffer(const OutputBuffer&) = delete;
  OutputBuffer& operator=(const OutputBuffer&) = delete;
  OutputBuffer& operator=(OutputBuffer&& other) noexcept {
    if (this != &other) {
      release();
      std::swap(data_, other.data_);
      std::swap(bytes_, other.bytes_);
      std::swap(device_, other.device_);
    }
    return *this;
  }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    if (data_ == nullptr) return;
    if (device_ == DeviceType::Cpu) {
      munmap(data_, bytes_);
    } else {
#if ATTNSUITE_HAVE_CUDA
      cudaFree(data_);
#endif
    }
    data_ = nullptr;
  }

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  DeviceType device_ = DeviceType::Cpu;
};

// Free device memory (cudaMemGetInfo), for the CUDA EP's arena growth; 0 without CUDA.
std::size_t free_device_bytes() {
#if ATTNSUITE_HAVE_CUDA
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) return free;
  cudaGetLastError();
#endif
  return 0;
}

PyObject* problem_dict(const AttentionProblem& p) {
  return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:O,s:i,s:i,s:d}", "batch", p.batch, "heads_q", p.heads_q,
                       "heads_kv", p.heads_kv, "seq_q", p.seq_q, "seq_kv", p.seq_kv, "head_dim", p.head_dim,
                       "head_dim_v", p.dim_v(), "dtype", std::string(to_string(p.dtype)).c_str(), "layout",
                       p.layout == Layout::BSHD ? "bshd" : "bhsd", "causal", p.causal ? Py_True : Py_False,
                       "window_left", p.window_left, "window_right", p.window_right, "scale",
                       static_cast<double>(p.softmax_scale()));
}

// Runs `call` under the GIL with the module; Python errors become Error(kind) with `what`.
template <class Call>
auto with_module(Call&& call) {
  PythonLock lock;
  PyObject* module = onnx_graphs_module();
  return call(module);
}

// One problem's session, output buffer and bound inputs. ONNX Runtime returns its output in a
// buffer of ours that the session writes (RunReport::output).
class OnnxRuntimePlan final : public KernelPlan {
 public:
  OnnxRuntimePlan(const AttentionProblem& problem, Form form, DeviceType device, std::string name)
      : problem_(problem), form_(form), device_(device), name_(std::move(name)) {}
  // The session is released under the GIL while the interpreter runs; after it has finalized
  // (the Python module's process exiting) the references are dropped without touching it.
  ~OnnxRuntimePlan() override {
    if (!runner_ && !run_) return;
    if (Py_IsInitialized()) {
      PythonLock lock;
      run_.reset();
      runner_.reset();
    } else {
      run_.abandon();
      runner_.abandon();
    }
  }
  OnnxRuntimePlan(const OnnxRuntimePlan&) = delete;
  OnnxRuntimePlan& operator=(const OnnxRuntimePlan&) = delete;

  std::string_view kernel_config() const override { return {}; }
  bool produces_own_output() const override { return true; }

  // The first run also measures the peak: on the CPU the growth of the process's resident set
  // during it (the output's pages and ONNX Runtime's arena and temporaries); on a GPU the output
  // plus the drop in free device memory (the CUDA EP's arena growing).
  RunReport forward(const AttentionArgs& args, Stream stream) override {
    const AttentionProblem& p = problem_;
    check_input("q", args.q, {p.batch, p.seq_q, p.heads_q, p.head_dim});
    check_input("k", args.k, {p.batch, p.seq_kv, p.heads_kv, p.head_dim});
    check_input("v", args.v, {p.batch, p.seq_kv, p.heads_kv, p.dim_v()});

    PythonLock lock;
    const bool first = !run_;
    if (first) prepare(stream);
    if (args.q.data != bound_[0] || args.k.data != bound_[1] || args.v.data != bound_[2]) {
      PyRef result(PyObject_CallMethod(runner_.get(), "bind", "KKKKi", pointer(args.q.data), pointer(args.k.data),
                                       pointer(args.v.data), pointer(output_view_.data), args.q.device.index));
      if (!result)
        throw Error(ErrorKind::Device, fmt::format("{}: binding the buffers failed: {}", name_, take_python_error()));
      bound_ = {args.q.data, args.k.data, args.v.data};
    }
    const bool measure_host = first && device_ == DeviceType::Cpu && reset_resident_peak();
    const bool measure_device = first && device_ == DeviceType::Cuda;
    const std::size_t resident_before = measure_host ? status_bytes("VmRSS") : 0;
    const std::size_t free_before = measure_device ? free_device_bytes() : 0;
    PyRef result(PyObject_CallNoArgs(run_.get()));
    if (!result) throw Error(ErrorKind::Device, fmt::format("{}: {}", name_, take_python_error()));
    RunReport report;
    if (measure_host) {
      const std::size_t peak = status_bytes("VmHWM");
      report.own_peak_memory_bytes = peak > resident_before ? peak - resident_before : 0;
    }
    if (measure_device) {
      const std::size_t free_after = free_device_bytes();
      report.own_peak_memory_bytes = output_.bytes() + (free_before > free_after ? free_before - free_after : 0);
    }
    report.output = output_view_;
    return report;
  }

 private:
  const char* form_name() const { return form_ == Form::Attention ? "attention" : "decomposed"; }
  const char* device_name() const { return device_ == DeviceType::Cuda ? "cuda" : "cpu"; }
  static unsigned long long pointer(const void* data) { return reinterpret_cast<std::uintptr_t>(data); }

  void check_input(const char* what, const TensorView& view, const std::array<std::int64_t, 4>& shape) const {
    ATTNSUITE_REQUIRE(!view.empty(), fmt::format("{}: {} is missing", name_, what));
    ATTNSUITE_REQUIRE(view.device.type == device_,
                      fmt::format("{}: {} is on the {}, this backend runs on the {}", name_, what,
                                  to_string(view.device.type), to_string(device_)));
    ATTNSUITE_REQUIRE(view.shape == shape && view.dtype == problem_.dtype,
                      fmt::format("{}: {} does not match the problem's shape and dtype", name_, what));
    // Strides of extent-1 dims are free (numpy sets them as it likes); the others must be dense.
    const auto dense = TensorView::dense_strides(shape, problem_.layout);
    bool is_dense = true;
    for (int dim = 0; dim < 4; ++dim) is_dense = is_dense && (shape[dim] == 1 || view.strides[dim] == dense[dim]);
    ATTNSUITE_CHECK(is_dense, ErrorKind::Unsupported,
                    fmt::format("{}: {} must be dense in the problem's layout ({}): ONNX Runtime binds whole buffers",
                                name_, what, to_string(problem_.layout)));
  }

  // The session for this shape and the output buffer, on the first run (the CUDA EP takes the
  // stream). Under the GIL.
  void prepare(Stream stream) {
    const AttentionProblem& p = problem_;
    const std::array<std::int64_t, 4> shape{p.batch, p.seq_q, p.heads_q, p.dim_v()};
    const std::size_t bytes = static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]) * size_of(p.dtype);
    output_ = OutputBuffer(bytes, device_);
    PyObject* module = onnx_graphs_module();
    PyRef problem(problem_dict(p));
    PyRef runner_type(PyObject_GetAttrString(module, "Runner"));
    PyRef positional(Py_BuildValue("(Oss)", problem.get(), form_name(), device_name()));
    // Same thread count as the CPU backends (cpu-flash uses every hardware thread).
    PyRef keywords(Py_BuildValue("{s:i,s:K}", "threads", device_ == DeviceType::Cpu ? cpu::cpu_threads() : 0, "stream",
                                 pointer(stream)));
    if (!runner_type || !positional || !keywords)
      throw Error(ErrorKind::Internal, fmt::format("{}: {}", name_, take_python_error()));
    runner_ = PyRef(PyObject_Call(runner_type.get(), positional.get(), keywords.get()));
    if (!runner_)
      throw Error(ErrorKind::Device, fmt::format("{}: creating the session failed: {}", name_, take_python_error()));
    run_ = PyRef(PyObject_GetAttrString(runner_.get(), "run"));
    if (!run_) throw Error(ErrorKind::Internal, fmt::format("{}: {}", name_, take_python_error()));
    output_view_.data = output_.data();
    output_view_.dtype = p.dtype;
    output_view_.device = {device_, 0};
    output_view_.shape = shape;
    output_view_.strides = TensorView::dense_strides(shape, p.layout);
  }

  AttentionProblem problem_;
  Form form_;
  DeviceType device_;
  std::string name_;
  PyRef runner_, run_;
  std::array<const void*, 3> bound_{};
  OutputBuffer output_;
  TensorView output_view_;
};

class OnnxRuntimeBackend final : public Backend {
 public:
  OnnxRuntimeBackend(Form form, DeviceType device) : form_(form), device_(device) {
    const bool cuda = device == DeviceType::Cuda;
    const bool decomposed = form == Form::Decomposed;
    name_ = std::string(cuda ? "onnxruntime-cuda" : "onnxruntime") + (decomposed ? "-decomposed" : "");
    display_name_ =
        fmt::format("ONNX Runtime ({} EP{})", cuda ? "CUDA" : "CPU", decomposed ? ", MatMul/Softmax graph" : "");
  }

  std::string_view name() const override { return name_; }
  std::string_view display_name() const override { return display_name_; }
  std::string_view peer_of() const override { return "ONNX Runtime"; }
  Device device() const override { return {device_, 0}; }

  std::string capabilities() const override {
    const std::string version = onnxruntime_version();
    return fmt::format(
        "{}; fp32, fp16 where the EP has the kernels (probed); GQA, causal and windows (a mask in "
        "the graph); O only, no LSE; onnxruntime {} through its Python API",
        form_ == Form::Attention ? "ONNX Attention operator (opset 23)" : "MatMul/Softmax/MatMul graph (opset 17)",
        version.empty() ? "not importable" : version);
  }

  // What ONNX Runtime can run is probed once per class of problems (dtype, layout, mask kind,
  // head dims) and remembered: the answers describe the installed onnxruntime, not a case.
  Support supports(const AttentionProblem& p) const override {
    try {
      p.validate();
    } catch (const Error& error) {
      return Support::no(error.what());
    }
    if (p.dtype == DType::BF16 || p.dtype == DType::E4M3)
      return Support::no(
          fmt::format("{} not supported: onnxruntime's Python API binds numpy dtypes and numpy has "
                      "no {}; allowed: fp32, fp16",
                      to_string(p.dtype), p.dtype == DType::BF16 ? "bfloat16" : "float8_e4m3fn"));
    for (std::int64_t i = 0; i < p.seq_q; ++i)
      if (p.key_end(i) <= p.key_begin(i))
        return Support::no(fmt::format("query row {} sees no key under this mask; ONNX's Softmax gives NaN there", i));
    const Support ready = environment();
    if (!ready) return ready;
    const std::string key = fmt::format("{} {} g{} c{} l{} r{} s{} d{} dv{}", to_string(p.dtype), to_string(p.layout),
                                        p.group_size() > 1, p.causal, p.window_left >= 0, p.window_right >= 0,
                                        (p.seq_q > p.seq_kv) - (p.seq_q < p.seq_kv), p.head_dim, p.dim_v());
    {
      std::lock_guard lock(probes_mutex_);
      if (auto found = probes_.find(key); found != probes_.end()) return found->second;
    }
    Support answer = with_module([&](PyObject* module) {
      PyRef problem(problem_dict(p));
      PyRef result(PyObject_CallMethod(module, "probe", "Oss", problem.get(), form_name(), device_name()));
      if (!result) return Support::no("onnxruntime probe failed: " + take_python_error());
      const char* reason = PyUnicode_AsUTF8(result.get());
      if (reason == nullptr) return Support::no(take_python_error());
      return *reason == '\0' ? Support::yes() : Support::no(fmt::format("onnxruntime: {}", reason));
    });
    std::lock_guard lock(probes_mutex_);
    probes_.emplace(key, answer);
    return answer;
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    require_support(*this, problem);
    choose_kernel_config(*this, problem, options);  // refuses a config: there is none
    return std::make_unique<OnnxRuntimePlan>(problem, form_, device_, name_);
  }

 private:
  const char* form_name() const { return form_ == Form::Attention ? "attention" : "decomposed"; }
  const char* device_name() const { return device_ == DeviceType::Cuda ? "cuda" : "cpu"; }

  // Whether onnxruntime and its execution provider are there: asked once.
  Support environment() const {
    std::call_once(environment_once_, [&] {
      try {
        environment_ = with_module([&](PyObject* module) {
          PyRef info(PyObject_CallMethod(module, "onnxruntime_info", nullptr));
          if (!info)
            return Support::no(
                fmt::format("onnxruntime cannot be imported: {} (pip install onnxruntime)", take_python_error()));
          PyObject* providers = PyTuple_GetItem(info.get(), 1);  // borrowed
          const char* wanted = device_ == DeviceType::Cuda ? "CUDAExecutionProvider" : "CPUExecutionProvider";
          PyRef name(PyUnicode_FromString(wanted));
          if (PySequence_Contains(providers, name.get()) != 1)
            return Support::no(fmt::format("the installed onnxruntime has no {}{}", wanted,
                                           device_ == DeviceType::Cuda ? " (pip install onnxruntime-gpu)" : ""));
          return Support::yes();
        });
      } catch (const Error& error) {
        environment_ = Support::no(error.what());
      }
    });
    return environment_;
  }

  Form form_;
  DeviceType device_;
  std::string name_, display_name_;
  mutable std::once_flag environment_once_;
  mutable Support environment_;
  mutable std::mutex probes_mutex_;
  mutable std::map<std::string, Support> probes_;
};

}  // namespace

std::string onnxruntime_version() {
  static std::optional<std::string> version;
  if (version) return *version;
  // From the package metadata (the onnxruntime or onnxruntime-gpu distribution), importing neither
  // onnxruntime nor onnx: every backends() listing asks (capabilities()), and in a Python process
  // that had imported torch, importing onnx ended the interpreter (a segmentation fault in
  // ml_dtypes, H100 image, 2026-12-06), so attnsuite.backends() crashed there.
  try {
    PythonLock lock;
    version = [] {
      PyRef metadata(PyImport_ImportModule("importlib.metadata"));
      if (!metadata) {
        take_python_error();
        return std::string();
      }
      for (const char* distribution : {"onnxruntime", "onnxruntime-gpu"}) {
        PyRef text(PyObject_CallMethod(metadata.get(), "version", "s", distribution));
        const char* utf8 = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
        if (utf8 != nullptr) return std::string(utf8);
        take_python_error();
      }
      return std::string();
    }();
  } catch (const Error&) {
    version = "";
  }
  return *version;
}

void register_onnxruntime_backends(Registry& registry) {
  registry.add("onnxruntime", [] { return std::make_unique<OnnxRuntimeBackend>(Form::Attention, DeviceType::Cpu); });
  registry.add("onnxruntime-decomposed",
               [] { return std::make_unique<OnnxRuntimeBackend>(Form::Decomposed, DeviceType::Cpu); });
#if ATTNSUITE_HAVE_CUDA
  registry.add("onnxruntime-cuda",
               [] { return std::make_unique<OnnxRuntimeBackend>(Form::Attention, DeviceType::Cuda); });
  registry.add("onnxruntime-cuda-decomposed",
               [] { return std::make_unique<OnnxRuntimeBackend>(Form::Decomposed, DeviceType::Cuda); });
#endif
}

}  // namespace attnsuite::onnxruntime
