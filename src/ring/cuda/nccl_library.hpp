// NCCL for `ring`, loaded with dlopen on first use instead of linked. A process that also loads
// PyTorch (the Python module under `import torch`, a build with the torch peers) must hold one
// libnccl.so.2, and it must be the newer one of the nvidia-nccl wheel that libtorch_cuda needs:
// the CUDA toolkit's NCCL 2.28 lacks symbols torch 2.15 calls (ncclCommSuspend, ...), so linking
// it made such builds fail to link and `import torch` after `import attnsuite` fail to load.
// Loaded by soname, NCCL is the copy already in the process if there is one, else the first
// on the search path (the binary's run path, LD_LIBRARY_PATH, the system's), else the one found
// when attnsuite was configured. ATTNSUITE_NCCL_LIBRARY=<path> names the file to load instead.
#pragma once

#include <nccl.h>

#include <string>

namespace attnsuite::cuda::nccl {

// The NCCL entry points `ring` calls, bound from the loaded library.
struct Api {
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  const char* (*last_error)(ncclComm_t) = nullptr;
  int version = 0;   // ncclGetVersion: 22809 is 2.28.9
  std::string path;  // the file the loader found, for messages
};

// The API once NCCL loaded (once per process, from the candidates above), else nullptr with
// *reason set to one line: what was tried and why it failed (dlopen's message, or the missing
// symbol).
const Api* load(std::string* reason);

// One attempt at the library file or soname `library`, not cached (for tests): true with *api
// bound, or false with *reason set as above. A library that loads stays loaded.
bool try_load(const std::string& library, Api* api, std::string* reason);

}  // namespace attnsuite::cuda::nccl
