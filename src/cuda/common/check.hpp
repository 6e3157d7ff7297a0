// Checked CUDA and cuBLAS calls. Any failure becomes attnsuite::Error with the failing call,
// the library's error string and file:line; destructors use the non-throwing variant.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

namespace attnsuite::cuda::detail {

// Throw Error(Device) — or Error(OutOfMemory) for cudaErrorMemoryAllocation and
// CUBLAS_STATUS_ALLOC_FAILED — naming the call. No-ops on success.
void check(cudaError_t status, const char* call, const char* file, int line);
void check(cublasStatus_t status, const char* call, const char* file, int line);
// Print the failure to stderr instead of throwing (for destructors and other noexcept paths).
void check_nothrow(cudaError_t status, const char* call, const char* file, int line) noexcept;

const char* cublas_status_string(cublasStatus_t status);

}  // namespace attnsuite::cuda::detail

#define ATTNSUITE_CUDA_CHECK(call) ::attnsuite::cuda::detail::check((call), #call, __FILE__, __LINE__)
#define ATTNSUITE_CUDA_CHECK_NOTHROW(call) \
  ::attnsuite::cuda::detail::check_nothrow((call), #call, __FILE__, __LINE__)
// After every kernel launch: a bad configuration (too much shared memory, grid too large) is
// only reported through cudaGetLastError.
#define ATTNSUITE_CUDA_CHECK_LAUNCH(kernel_name) \
  ::attnsuite::cuda::detail::check(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
