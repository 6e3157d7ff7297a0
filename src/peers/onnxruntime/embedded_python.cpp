#define PY_SSIZE_T_CLEAN
#include "peers/onnxruntime/embedded_python.hpp"

#include <Python.h>
#include <fmt/format.h>

#include <mutex>

#include "attnsuite/error.hpp"

namespace attnsuite::onnxruntime {

namespace {

// Starts an interpreter when the process has none (the CLI, the tests). The GIL is released
// right away so that any thread can take it through PythonLock; the interpreter is never
// finalized: onnxruntime's thread pools may outlive a finalize at exit.
void ensure_interpreter() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (Py_IsInitialized()) return;
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    const PyStatus status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status))
      throw Error(ErrorKind::Unsupported, fmt::format("the embedded Python interpreter did not start: {}",
                                                      status.err_msg != nullptr ? status.err_msg : "unknown error"));
    PyEval_SaveThread();
  });
}

}  // namespace

PythonLock::PythonLock() {
  ensure_interpreter();
  state_ = static_cast<int>(PyGILState_Ensure());
}

PythonLock::~PythonLock() { PyGILState_Release(static_cast<PyGILState_STATE>(state_)); }

PyRef::~PyRef() { reset(); }

PyRef& PyRef::operator=(PyRef&& other) noexcept {
  if (this != &other) {
    reset();
    object_ = other.object_;
    other.object_ = nullptr;
  }
  return *this;
}

void PyRef::reset() {
  Py_XDECREF(object_);
  object_ = nullptr;
}

std::string take_python_error() {
  if (PyErr_Occurred() == nullptr) return "";
  // PyErr_Fetch, not PyErr_GetRaisedException: that is Python 3.12+.
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  PyRef owned_type(type), owned_value(value), owned_traceback(traceback);
  const char* type_name = type != nullptr ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "Python error";
  std::string line;
  if (value != nullptr) {
    PyRef message(PyObject_Str(value));
    const char* utf8 = message ? PyUnicode_AsUTF8(message.get()) : nullptr;
    if (utf8 == nullptr) PyErr_Clear();
    line = utf8 != nullptr ? utf8 : "";
  }
  while (!line.empty() && (line.front() == '\n' || line.front() == ' ')) line.erase(0, 1);
  if (const auto newline = line.find('\n'); newline != std::string::npos) line.resize(newline);
  return line.empty() ? type_name : fmt::format("{}: {}", type_name, line);
}

PyObject* onnx_graphs_module() {
  static PyObject* module = nullptr;  // owned by sys.modules
  if (module != nullptr) return module;
  PyObject* created = PyImport_AddModule("attnsuite_embedded_onnx_graphs");  // borrowed
  ATTNSUITE_CHECK(created != nullptr, ErrorKind::Internal, take_python_error());
  PyObject* globals = PyModule_GetDict(created);  // borrowed
  if (PyDict_GetItemString(globals, "__builtins__") == nullptr)
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  const std::string source(onnx_graphs_source());
  PyRef code(Py_CompileString(source.c_str(), "attnsuite/onnx_graphs.py", Py_file_input));
  if (!code) throw Error(ErrorKind::Internal, "onnx_graphs.py does not compile: " + take_python_error());
  PyRef result(PyEval_EvalCode(code.get(), globals, globals));
  if (!result) {
    const std::string why = take_python_error();
    // A failed import leaves a half-made module: drop it so the next call retries.
    PyObject* modules = PyImport_GetModuleDict();
    if (PyDict_DelItemString(modules, "attnsuite_embedded_onnx_graphs") != 0) PyErr_Clear();
    throw Error(ErrorKind::Unsupported,
                fmt::format("{} (install the Python packages with scripts/setup-python.sh, or "
                            "pip install numpy onnx onnxruntime for {})",
                            why, Py_GetVersion() != nullptr ? std::string(Py_GetVersion()).substr(0, 6) : "Python"));
  }
  module = created;
  return module;
}

}  // namespace attnsuite::onnxruntime
