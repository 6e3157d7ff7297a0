// The Python interpreter the ONNX Runtime peers call into. Inside the Python module it is the
// host process's interpreter; in the CLI and the tests it is started here, on first use, without
// Python's signal handlers (the CLI keeps its own SIGINT handling).
#pragma once

#include <string>
#include <string_view>

// PyObject is `struct _object`: declared here so that includers need not include Python.h.
struct _object;

namespace attnsuite::onnxruntime {

// Holds the GIL for its lifetime (PyGILState_Ensure / Release); starts the interpreter first if
// this process has none.
class PythonLock {
 public:
  PythonLock();
  ~PythonLock();
  PythonLock(const PythonLock&) = delete;
  PythonLock& operator=(const PythonLock&) = delete;

 private:
  int state_;
};

// A strong reference, released under the GIL (callers hold a PythonLock).
class PyRef {
 public:
  PyRef() = default;
  explicit PyRef(_object* owned) : object_(owned) {}
  ~PyRef();
  PyRef(PyRef&& other) noexcept : object_(other.object_) { other.object_ = nullptr; }
  PyRef& operator=(PyRef&& other) noexcept;
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  _object* get() const { return object_; }
  explicit operator bool() const { return object_ != nullptr; }
  void reset();
  // Forgets the reference without releasing it (the interpreter is gone).
  void abandon() { object_ = nullptr; }

 private:
  _object* object_ = nullptr;
};

// The current Python exception as one line ("ModuleNotFoundError: No module named 'onnx'"),
// cleared; "" when none is set. Call under the GIL.
std::string take_python_error();

// The module that runs python/attnsuite/onnx_graphs.py (embedded at build time), created on
// first use; throws Error(Unsupported) with the Python error when its imports fail (onnx or numpy
// missing). Call under the GIL; the reference is borrowed.
_object* onnx_graphs_module();

// The text of python/attnsuite/onnx_graphs.py (generated source).
std::string_view onnx_graphs_source();

}  // namespace attnsuite::onnxruntime
