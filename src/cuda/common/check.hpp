// Checked CUDA and cuBLAS calls. Any failure becomes attnsuite::Error with the failing call,
// the library's error string and file:line; destructors use the non-throwing variant.
//
// Every ATTNSUITE_CUDA_CHECK(call) is a fault-injection point (src/fault/fault.hpp, ATTNSUITE_FAULT=
// cuda:N): the n-th checked call is not made and fails with cudaErrorUnknown (or
// CUBLAS_STATUS_INTERNAL_ERROR), so nothing it would have allocated can leak. Releases
// (ATTNSUITE_CUDA_CHECK_NOTHROW) are never failed: they must always run.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

namespace attnsuite::cuda::detail {

// Throw Error(Device) — or Error(OutOfMemory) for cudaErrorMemoryAllocation and
// CUBLAS_STATUS_ALLOC_FAILED — naming the call. No-ops on success.
void check(cudaError_t status, const char* call, const char* file, int line);
void check(cublasStatus_t status, const char* call, const char* file, int line);
// Print the failure to stderr instead of throwing (for destructors and other noexcept paths).
void check_nothrow(cudaError_t status, const char* call, const char* file, int line) noexcept;

const char* cublas_status_string(cublasStatus_t status);

// Fault injection: true when this checked call must fail instead of being made; the event
// number is kept (per thread) for check()'s message.
bool inject_fault() noexcept;
template <class Status>
Status injected_status();
template <>
inline cudaError_t injected_status<cudaError_t>() {
  return cudaErrorUnknown;
}
template <>
inline cublasStatus_t injected_status<cublasStatus_t>() {
  return CUBLAS_STATUS_INTERNAL_ERROR;
}

}  // namespace attnsuite::cuda::detail

// The call, or an injected failure in its place when fault injection says so.
#define ATTNSUITE_CUDA_FAULT_POINT(call)                                            \
  (::attnsuite::cuda::detail::inject_fault()                                        \
       ? ::attnsuite::cuda::detail::injected_status<std::decay_t<decltype(call)>>() \
       : (call))
#define ATTNSUITE_CUDA_CHECK(call) \
  ::attnsuite::cuda::detail::check(ATTNSUITE_CUDA_FAULT_POINT(call), #call, __FILE__, __LINE__)
// For a status a call already returned (no fault point: the call was made).
#define ATTNSUITE_CUDA_CHECK_STATUS(status) ::attnsuite::cuda::detail::check((status), #status, __FILE__, __LINE__)
#define ATTNSUITE_CUDA_CHECK_NOTHROW(call) ::attnsuite::cuda::detail::check_nothrow((call), #call, __FILE__, __LINE__)
// After every kernel launch: a bad configuration (too much shared memory, grid too large) is
// only reported through cudaGetLastError.
#define ATTNSUITE_CUDA_CHECK_LAUNCH(kernel_name)                                                                       \
  ::attnsuite::cuda::detail::check(ATTNSUITE_CUDA_FAULT_POINT(cudaGetLastError()), "launch of " kernel_name, __FILE__, \
                                   __LINE__)
