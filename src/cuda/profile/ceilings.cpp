// The GPU's ceilings for the profile (docs/methodology.md, "Profile"): device copy bandwidth,
// dense GEMM rates through cuBLAS (fp16, bf16) and cuBLASLt (fp8 e4m3), and the smallest
// timed operation. Measured once per run, before any case; every figure is the best of its
// repetitions, as a ceiling is a maximum. Host code only: the GEMMs are the vendor's.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"
#include "cuda/cuda_backends.hpp"

namespace attnsuite::cuda {
namespace {

// 8192³ is large enough that cuBLAS reaches its sustained rate on an H100/H200 (2·8192³ =
// 1.1 TFLOP, a millisecond or two) and small enough (3 × 128 MiB in 16 bits) for any GPU we
// measure on.
constexpr int kGemmSize = 8192;
constexpr int kGemmReps = 10;
// Twice a gibibyte moved per copy: far beyond the H200's 60 MiB L2.
constexpr std::size_t kCopyBytes = std::size_t{1} << 30;
constexpr int kCopyReps = 10;
constexpr int kLaunchReps = 50;
constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;

// Scratch memory of the measurement, not counted as any backend's.
class Scratch {
 public:
  explicit Scratch(std::size_t bytes) : bytes_(bytes) { ATTNSUITE_CUDA_CHECK(cudaMalloc(&data_, bytes)); }
  ~Scratch() { ATTNSUITE_CUDA_CHECK_NOTHROW(cudaFree(data_)); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

class ScratchStream {
 public:
  ScratchStream() { ATTNSUITE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~ScratchStream() { ATTNSUITE_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_)); }
  ScratchStream(const ScratchStream&) = delete;
  ScratchStream& operator=(const ScratchStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class EventPair {
 public:
  EventPair() {
    ATTNSUITE_CUDA_CHECK(cudaEventCreate(&start_));
    const cudaError_t status = cudaEventCreate(&stop_);
    if (status != cudaSuccess) cudaEventDestroy(start_);
    ATTNSUITE_CUDA_CHECK_STATUS(status);
  }
  ~EventPair() {
    ATTNSUITE_CUDA_CHECK_NOTHROW(cudaEventDestroy(start_));
    ATTNSUITE_CUDA_CHECK_NOTHROW(cudaEventDestroy(stop_));
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;

  // The fastest of `reps` event-timed runs of `work` on the stream, in milliseconds.
  template <class Work>
  double best_ms(cudaStream_t stream, int reps, Work&& work) {
    double best = 0;
    for (int rep = 0; rep < reps; ++rep) {
      ATTNSUITE_CUDA_CHECK(cudaEventRecord(start_, stream));
      work();
      ATTNSUITE_CUDA_CHECK(cudaEventRecord(stop_, stream));
      ATTNSUITE_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      ATTNSUITE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      best = rep == 0 ? ms : std::min<double>(best, ms);
    }
    return best;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Marsaglia's xorshift64 (13, 7, 17): the state after `state`.
std::uint64_t xorshift64(std::uint64_t state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// Random finite values of magnitude 2^-8 .. 1 (fp16, bf16) or 2^-6 .. 1 (e4m3) as raw bits, so
// no conversion header is needed: GEMMs of zeros draw less power and would clock higher.
enum class Bits { F16, BF16, E4M3 };

std::vector<std::uint16_t> random_bits16(std::size_t count, Bits format) {
  std::vector<std::uint16_t> out(count);
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  for (auto& value : out) {
    state = xorshift64(state);
    const auto sign = static_cast<std::uint16_t>(state & 1);
    const auto exponent_step = static_cast<std::uint16_t>((state >> 1) & 7);  // 8 binades
    if (format == Bits::F16) {                                                // bias 15: exponents 7..14
      value = static_cast<std::uint16_t>(sign << 15 | (7 + exponent_step) << 10 | ((state >> 4) & 0x3FF));
    } else {  // bf16, bias 127: exponents 119..126
      value = static_cast<std::uint16_t>(sign << 15 | (119 + exponent_step) << 7 | ((state >> 4) & 0x7F));
    }
  }
  return out;
}

std::vector<std::uint8_t> random_e4m3(std::size_t count) {
  std::vector<std::uint8_t> out(count);
  std::uint64_t state = 0xD1B54A32D192ED03ull;
  for (auto& value : out) {
    state = xorshift64(state);
    // bias 7: exponents 1..6 stay clear of 15, where e4m3 keeps its NaN.
    const auto exponent = static_cast<std::uint8_t>(1 + (state >> 1) % 6);
    value = static_cast<std::uint8_t>((state & 1) << 7 | exponent << 3 | ((state >> 4) & 7));
  }
  return out;
}

double gemm_flops() { return 2.0 * kGemmSize * kGemmSize * static_cast<double>(kGemmSize); }

// cuBLAS GEMM, C = Aᵀ·B in the input dtype with fp32 accumulation: TFLOP/s.
double cublas_gemm_tflops(cudaStream_t stream, EventPair& events, cudaDataType_t type, Bits format) {
  const std::size_t elements = static_cast<std::size_t>(kGemmSize) * kGemmSize;
  const std::vector<std::uint16_t> host = random_bits16(elements, format);
  Scratch a(elements * 2), b(elements * 2), c(elements * 2);
  ATTNSUITE_CUDA_CHECK(cudaMemcpy(a.data(), host.data(), a.bytes(), cudaMemcpyHostToDevice));
  ATTNSUITE_CUDA_CHECK(cudaMemcpy(b.data(), host.data(), b.bytes(), cudaMemcpyHostToDevice));

  cublasHandle_t handle = nullptr;
  ATTNSUITE_CUDA_CHECK(cublasCreate(&handle));
  struct Destroy {
    cublasHandle_t h;
    ~Destroy() { cublasDestroy(h); }
  } destroy{handle};
  ATTNSUITE_CUDA_CHECK(cublasSetStream(handle, stream));
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    ATTNSUITE_CUDA_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, kGemmSize, kGemmSize, kGemmSize, &alpha,
                                      a.data(), type, kGemmSize, b.data(), type, kGemmSize, &beta, c.data(), type,
                                      kGemmSize, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  for (int warm = 0; warm < 3; ++warm) gemm();
  const double ms = events.best_ms(stream, kGemmReps, gemm);
  return gemm_flops() / (ms * 1e-3) * 1e-12;
}

// cuBLASLt fp8 GEMM: e4m3 A and B in the "TN" layout fp8 requires, bf16 D, fp32 accumulation.
// 0 when no algorithm exists (GPUs before sm_89 have no fp8 tensor cores).
double cublaslt_fp8_tflops(cudaStream_t stream, EventPair& events) {
  const std::size_t elements = static_cast<std::size_t>(kGemmSize) * kGemmSize;
  cublasLtHandle_t lt = nullptr;
  ATTNSUITE_CUDA_CHECK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, d_layout = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  struct Cleanup {
    cublasLtHandle_t& lt;
    cublasLtMatmulDesc_t& op;
    cublasLtMatrixLayout_t &a, &b, &d;
    cublasLtMatmulPreference_t& preference;
    ~Cleanup() {
      if (preference) cublasLtMatmulPreferenceDestroy(preference);
      if (d) cublasLtMatrixLayoutDestroy(d);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (op) cublasLtMatmulDescDestroy(op);
      cublasLtDestroy(lt);
    }
  } cleanup{lt, op, a_layout, b_layout, d_layout, preference};

  ATTNSUITE_CUDA_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  ATTNSUITE_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  ATTNSUITE_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  ATTNSUITE_CUDA_CHECK(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_8F_E4M3, kGemmSize, kGemmSize, kGemmSize));
  ATTNSUITE_CUDA_CHECK(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_8F_E4M3, kGemmSize, kGemmSize, kGemmSize));
  ATTNSUITE_CUDA_CHECK(cublasLtMatrixLayoutCreate(&d_layout, CUDA_R_16BF, kGemmSize, kGemmSize, kGemmSize));
  ATTNSUITE_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const std::size_t workspace_bytes = kLtWorkspaceBytes;
  ATTNSUITE_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(lt, op, a_layout, b_layout, d_layout, d_layout, preference, 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return 0.0;
  ATTNSUITE_CUDA_CHECK_STATUS(status);

  const std::vector<std::uint8_t> host = random_e4m3(elements);
  Scratch a(elements), b(elements), d(elements * 2), workspace(workspace_bytes);
  ATTNSUITE_CUDA_CHECK(cudaMemcpy(a.data(), host.data(), a.bytes(), cudaMemcpyHostToDevice));
  ATTNSUITE_CUDA_CHECK(cudaMemcpy(b.data(), host.data(), b.bytes(), cudaMemcpyHostToDevice));
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    ATTNSUITE_CUDA_CHECK(cublasLtMatmul(lt, op, &alpha, a.data(), a_layout, b.data(), b_layout, &beta, d.data(),
                                        d_layout, d.data(), d_layout, &heuristic.algo, workspace.data(),
                                        workspace_bytes, stream));
  };
  for (int warm = 0; warm < 3; ++warm) gemm();
  const double ms = events.best_ms(stream, kGemmReps, gemm);
  return gemm_flops() / (ms * 1e-3) * 1e-12;
}

}  // namespace

bench::DeviceCeilings measure_gpu_ceilings(int device_index) {
  const CudaDeviceInfo info = query_cuda_device(device_index);
  ATTNSUITE_CUDA_CHECK(cudaSetDevice(info.index));
  ScratchStream stream;
  EventPair events;
  bench::DeviceCeilings ceilings;

  {
    // A copy buffer of a quarter of the memory at most, for GPUs smaller than 8 GiB.
    const std::size_t bytes = std::min(kCopyBytes, info.memory_bytes / 8);
    Scratch source(bytes), target(bytes);
    ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(source.data(), 1, bytes, stream.get()));
    auto copy = [&] {
      ATTNSUITE_CUDA_CHECK(
          cudaMemcpyAsync(target.data(), source.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
    };
    copy();
    const double ms = events.best_ms(stream.get(), kCopyReps, copy);
    ceilings.gpu_copy_gbps = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) * 1e-9;
  }
  {
    Scratch byte(256);
    auto touch = [&] { ATTNSUITE_CUDA_CHECK(cudaMemsetAsync(byte.data(), 0, 1, stream.get())); };
    touch();
    ceilings.gpu_launch_us = events.best_ms(stream.get(), kLaunchReps, touch) * 1e3;
  }
  ceilings.gpu_fp16_tflops = cublas_gemm_tflops(stream.get(), events, CUDA_R_16F, Bits::F16);
  ceilings.gpu_bf16_tflops = cublas_gemm_tflops(stream.get(), events, CUDA_R_16BF, Bits::BF16);
  if (info.compute_capability() >= 89) ceilings.gpu_fp8_tflops = cublaslt_fp8_tflops(stream.get(), events);
  ceilings.gpu_gemm_shape = fmt::format("{0}x{0}x{0}", kGemmSize);
  ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  return ceilings;
}

}  // namespace attnsuite::cuda
