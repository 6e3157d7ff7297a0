// ATTNSUITE_HOST_DEVICE: a function compiled for both sides — __host__ __device__ __forceinline__
// under nvcc, plain inline in host C++ — for the rules the kernels and their CPU tests share
// (backward_rows.hpp, exp2_fma.hpp).
#pragma once

#if defined(__CUDACC__)
#define ATTNSUITE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ATTNSUITE_HOST_DEVICE inline
#endif
