// The PyTorch peers through libtorch: torch-sdpa (PyTorch's own backend choice), torch-flash,
// torch-efficient, torch-cudnn and torch-math (each one named SDPA backend, forced).
//
// They are built into a module of their own, libattnsuite_torch.so (torch_sdpa.cpp, the only
// file that sees libtorch), which the first lookup of one of them loads (torch_module.cpp).
// Linked into attnsuite instead, libtorch's start-up ran in every program: `attnsuite --help`
// of a CUDA build took 1.0 s and 491 MB against 0.24 s and 261 MB now (2-core VM, loaded), and
// so did each of the ~600 test processes. The module takes attnsuite's own functions from the
// program that loads it (programs export them; the Python module makes itself global first).
#pragma once

#include <string>

#include "attnsuite/backend.hpp"
#include "attnsuite/registry.hpp"

namespace attnsuite::peers {

// Adds the five in the order above; nothing is loaded until one of them is first looked up
// (Registry::find). Where the module cannot be loaded (torch was removed or upgraded since the
// build), each of them refuses every problem with the loader's message.
void register_torch_backends(Registry& registry);
// The libtorch this build was made against, "2.15.0" (read without loading the module).
std::string torch_version();

}  // namespace attnsuite::peers

// The module's one entry point: a new backend of that registry name, or nullptr for another name.
extern "C" __attribute__((visibility("default"))) attnsuite::Backend* attnsuite_torch_peer_create(const char* name);
