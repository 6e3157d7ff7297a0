#include "cuda/common/check.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "attnsuite/error.hpp"
#include "fault/fault.hpp"

namespace attnsuite::cuda::detail {

namespace {
// The event number of the fault injected on this thread and not yet reported, else 0.
thread_local std::uint64_t t_injected_event = 0;

std::string injected_note() {
  const std::uint64_t event = t_injected_event;
  t_injected_event = 0;
  return event == 0 ? std::string() : fmt::format(" (fault injected by ATTNSUITE_FAULT=cuda:{})", event);
}
}  // namespace

bool inject_fault() noexcept {
  const std::uint64_t event = fault::fail_here(fault::Site::CudaCall);
  if (event == 0) return false;
  t_injected_event = event;
  return true;
}

void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky non-fatal error so the next check does not see it again
  const ErrorKind kind = status == cudaErrorMemoryAllocation ? ErrorKind::OutOfMemory : ErrorKind::Device;
  throw Error(kind, fmt::format("{} failed: {} ({}) at {}:{}{}", call, cudaGetErrorString(status),
                                cudaGetErrorName(status), file, line, injected_note()));
}

const char* cublas_status_string(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const ErrorKind kind = status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::OutOfMemory : ErrorKind::Device;
  throw Error(kind,
              fmt::format("{} failed: {} at {}:{}{}", call, cublas_status_string(status), file, line, injected_note()));
}

void check_nothrow(cudaError_t status, const char* call, const char* file, int line) noexcept {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "attnsuite: %s failed: %s at %s:%d\n", call, cudaGetErrorString(status), file, line);
}

}  // namespace attnsuite::cuda::detail
