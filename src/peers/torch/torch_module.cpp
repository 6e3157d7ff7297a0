// The host side of the PyTorch peers (torch_sdpa.hpp): their registration, and the loading of
// libattnsuite_torch.so on the first lookup of one of them. No libtorch header here.
#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "attnsuite/error.hpp"
#include "peers/torch/torch_sdpa.hpp"

namespace attnsuite::peers {
namespace {

constexpr const char* kModuleFile = "libattnsuite_torch.so";
constexpr std::string_view kNames[] = {"torch-sdpa", "torch-flash", "torch-efficient", "torch-cudnn", "torch-math"};

using Create = Backend* (*)(const char*);

struct Module {
  Create create = nullptr;
  std::string error;  // why it was not loaded
};

// The file of the object this code is linked into: the program's (is_program) or the Python
// module's.
std::string host_file(bool* is_program) {
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(&host_file), &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 ||
      map == nullptr)
    return {};
  *is_program = map->l_name == nullptr || map->l_name[0] == '\0';
  if (!*is_program) return map->l_name;
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return length > 0 ? std::string(path, static_cast<std::size_t>(length)) : std::string();
}

// Where the module may be, in order. Beside the Python module (installed, and the build tree's
// python/attnsuite, where it is built); for an installed program, the package directory of its
// environment (bin/ to site-packages/attnsuite, from the install scheme at configure time) and
// of `pip install --target` (<target>/bin, <target>/attnsuite); for a program of the build tree,
// the build's own.
// ATTNSUITE_TORCH_MODULE=<file> names the one file to load instead.
std::vector<std::string> candidates(const std::string& host, bool is_program) {
  if (const char* chosen = std::getenv("ATTNSUITE_TORCH_MODULE"); chosen != nullptr && *chosen != '\0') return {chosen};
  std::vector<std::string> files;
  if (!host.empty()) {
    const std::string directory = host.substr(0, host.rfind('/'));
    if (!is_program) files.push_back(directory + "/" + kModuleFile);
#ifdef ATTNSUITE_TORCH_MODULE_FROM_PROGRAM
    if (is_program) {
      files.push_back(directory + "/" + ATTNSUITE_TORCH_MODULE_FROM_PROGRAM + "/" + kModuleFile);
      files.push_back(directory + "/../attnsuite/" + kModuleFile);
    }
#endif
  }
#ifdef ATTNSUITE_TORCH_MODULE_BUILD_PATH
  files.push_back(ATTNSUITE_TORCH_MODULE_BUILD_PATH);
#endif
  return files;
}

const Module& module() {
  static Module loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    bool is_program = false;
    const std::string host = host_file(&is_program);
    // The module takes attnsuite's functions from the global scope. A program exports them (a
    // link option, src/peers/CMakeLists.txt); Python loads its modules locally, so the Python
    // module joins the global scope first (RTLD_NOLOAD: the copy already loaded).
    if (!is_program && !host.empty()) dlopen(host.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
    std::string tried;
    const std::vector<std::string> files = candidates(host, is_program);
    for (const std::string& file : files) {
      if (access(file.c_str(), F_OK) != 0) continue;
      void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* error = dlerror();
        tried += fmt::format("{}{}", tried.empty() ? "" : "; ", error != nullptr ? error : file);
        continue;
      }
      loaded.create = reinterpret_cast<Create>(dlsym(handle, "attnsuite_torch_peer_create"));
      if (loaded.create != nullptr) return;
      tried += fmt::format("{}{} has no attnsuite_torch_peer_create", tried.empty() ? "" : "; ", file);
    }
    if (tried.empty()) {
      std::string looked;
      for (const std::string& file : files) looked += (looked.empty() ? "" : ", ") + file;
      tried = fmt::format("{} not found (looked for {})", kModuleFile, looked);
    }
    loaded.error = fmt::format("the PyTorch peers' module could not be loaded: {}", tried);
  });
  return loaded;
}

// What a torch peer is where its module cannot be loaded: it refuses every problem, saying why.
class UnloadedTorchBackend final : public IdentifiedBackend {
 public:
  UnloadedTorchBackend(std::string_view name, std::string reason)
      : IdentifiedBackend({std::string(name),
                           "PyTorch SDPA peer (not loaded)",
                           {DeviceType::Cuda, 0},
                           "none here: " + reason,
                           "PyTorch"}),
        reason_(std::move(reason)) {}
  Support supports(const AttentionProblem&) const override { return Support::no(reason_); }
  std::unique_ptr<KernelPlan> plan(const AttentionProblem&, const PlanOptions&) const override {
    throw Error(ErrorKind::Unsupported, fmt::format("{}: {}", name(), reason_));
  }

 private:
  std::string reason_;
};

}  // namespace

void register_torch_backends(Registry& registry) {
  for (std::string_view name : kNames) {
    registry.add(std::string(name), [name]() -> std::unique_ptr<Backend> {
      const Module& loaded = module();
      if (loaded.create == nullptr) return std::make_unique<UnloadedTorchBackend>(name, loaded.error);
      Backend* backend = loaded.create(std::string(name).c_str());
      if (backend == nullptr)
        return std::make_unique<UnloadedTorchBackend>(name, fmt::format("{} has no backend {}", kModuleFile, name));
      return std::unique_ptr<Backend>(backend);
    });
  }
}

std::string torch_version() { return ATTNSUITE_TORCH_VERSION_STRING; }

}  // namespace attnsuite::peers
