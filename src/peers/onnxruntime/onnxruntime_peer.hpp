// The ONNX Runtime peers: an ONNX model of the problem's attention (python/attnsuite/
// onnx_graphs.py) run by onnxruntime's InferenceSession with its inputs and output bound to the
// harness's buffers (IOBinding), called through an embedded Python interpreter. Host-only header.
#pragma once

#include <string>

#include "attnsuite/registry.hpp"

namespace attnsuite::onnxruntime {

// Registers "onnxruntime" (the standard Attention operator, opset 23) and
// "onnxruntime-decomposed" (the MatMul/Softmax graph, opset 17) on the CPU execution provider,
// and in CUDA builds "onnxruntime-cuda" and "onnxruntime-cuda-decomposed" on the CUDA one.
// Starts no interpreter: that happens on the first supports() or forward().
void register_onnxruntime_backends(Registry& registry);

// The importable onnxruntime's version ("1.32.0"), or "" when it cannot be imported.
std::string onnxruntime_version();

}  // namespace attnsuite::onnxruntime
