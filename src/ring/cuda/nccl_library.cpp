#include "ring/cuda/nccl_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace attnsuite::cuda::nccl {
namespace {

template <class Fn>
void bind(void* handle, const char* symbol, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (fn == nullptr && missing.empty()) missing = symbol;
}

// Where the loader looks, in order (nccl_library.hpp).
std::vector<std::string> candidates() {
  if (const char* chosen = std::getenv("ATTNSUITE_NCCL_LIBRARY"); chosen != nullptr && *chosen != '\0') return {chosen};
  std::vector<std::string> names = {"libnccl.so.2"};
#ifdef ATTNSUITE_NCCL_CONFIGURED_DIR
  names.push_back(ATTNSUITE_NCCL_CONFIGURED_DIR "/libnccl.so.2");
#endif
  return names;
}

struct Loaded {
  Api api;
  bool ok = false;
  std::string reason;
};

}  // namespace

bool try_load(const std::string& library, Api* api, std::string* reason) {
  // RTLD_LOCAL: NCCL's symbols stay out of the global scope; libtorch_cuda binds its references
  // by soname and gets this same copy.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    *reason = error != nullptr ? error : library + ": cannot be loaded";
    return false;
  }
  Api bound;
  std::string missing;
  ncclResult_t (*get_version)(int*) = nullptr;
  bind(handle, "ncclGetVersion", get_version, missing);
  bind(handle, "ncclCommInitAll", bound.comm_init_all, missing);
  bind(handle, "ncclCommDestroy", bound.comm_destroy, missing);
  bind(handle, "ncclCommAbort", bound.comm_abort, missing);
  bind(handle, "ncclSend", bound.send, missing);
  bind(handle, "ncclRecv", bound.recv, missing);
  bind(handle, "ncclGroupStart", bound.group_start, missing);
  bind(handle, "ncclGroupEnd", bound.group_end, missing);
  bind(handle, "ncclGetErrorString", bound.error_string, missing);
  bind(handle, "ncclGetLastError", bound.last_error, missing);
  // The file the soname resolved to (dlinfo would do too; dladdr needs no extra header).
  Dl_info info{};
  void* symbol = dlsym(handle, missing == "ncclGetVersion" ? "ncclCommInitAll" : "ncclGetVersion");
  bound.path = symbol != nullptr && dladdr(symbol, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : library;
  if (!missing.empty()) {
    *reason = fmt::format("{} has no {} (ring needs NCCL 2.13 or later)", bound.path, missing);
    return false;
  }
  if (get_version(&bound.version) != ncclSuccess) bound.version = 0;
  *api = std::move(bound);
  return true;
}

const Api* load(std::string* reason) {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    for (const std::string& candidate : candidates()) {
      std::string why;
      if (try_load(candidate, &loaded.api, &why)) {
        loaded.ok = true;
        return;
      }
      tried += (tried.empty() ? "" : "; ") + why;
    }
    loaded.reason = fmt::format(
        "NCCL could not be loaded ({}); install NCCL (libnccl.so.2: the CUDA toolkit's, "
        "Debian's libnccl2 or PyPI's nvidia-nccl) or set ATTNSUITE_NCCL_LIBRARY to its file",
        tried);
  });
  if (!loaded.ok) {
    if (reason != nullptr) *reason = loaded.reason;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace attnsuite::cuda::nccl
