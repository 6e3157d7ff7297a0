#include "cuda/hopper/tensor_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>
#include <mutex>
#include <vector>

#include "attnsuite/error.hpp"
#include "cuda/common/check.hpp"

namespace attnsuite::cuda::hopper {
namespace {

constexpr std::int64_t kMaxStrideBytes = std::int64_t{1} << 40;

// cuTensorMapEncodeTiled from the driver the runtime loaded (resolved once; a failure throws
// and is retried on the next call).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
    ATTNSUITE_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pointer, 12000, cudaEnableDefault, &query));
    if (query != cudaDriverEntryPointSuccess || pointer == nullptr) {
      throw Error(ErrorKind::Device,
                  fmt::format("TMA: the CUDA driver has no cuTensorMapEncodeTiled (entry point query result {})",
                              static_cast<int>(query)));
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pointer);
  }();
  return function;
}

bool same_shape(const TensorMapShape& a, const TensorMapShape& b) {
  return a.data == b.data && a.dtype == b.dtype && a.head_dim == b.head_dim && a.rows == b.rows && a.heads == b.heads &&
         a.batch == b.batch && a.row_stride == b.row_stride && a.head_stride == b.head_stride &&
         a.batch_stride == b.batch_stride && a.box_rows == b.box_rows && a.e4m3 == b.e4m3 &&
         a.box_columns == b.box_columns;
}

CUtensorMap encode(const TensorMapShape& shape) {
  const std::int64_t element_bytes = shape.e4m3 ? 1 : static_cast<std::int64_t>(size_of(shape.dtype));
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(shape.head_dim), static_cast<cuuint64_t>(shape.rows),
                              static_cast<cuuint64_t>(shape.heads), static_cast<cuuint64_t>(shape.batch)};
  // Strides of dims 1..3 in bytes (dim 0 is contiguous). They need not grow with the dim
  // index: BSHD has row stride > head stride, BHSD the reverse.
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(shape.row_stride * element_bytes),
                                 static_cast<cuuint64_t>(shape.head_stride * element_bytes),
                                 static_cast<cuuint64_t>(shape.batch_stride * element_bytes)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(shape.box_columns), static_cast<cuuint32_t>(shape.box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  // e4m3 is copied as bytes (the tensor map has no 8-bit float type; TMA moves bits anyway).
  const CUtensorMapDataType type = shape.e4m3                  ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : shape.dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  // The swizzle spans the box row: 128 bytes (every 16-bit map, e4m3 d128) or 64 (e4m3 d64).
  const CUtensorMapSwizzle swizzle =
      shape.box_columns * element_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
  CUtensorMap map;
  // 128B (64B) swizzle: the layout wgmma's descriptors describe (primitives.cuh). OOB fill NONE
  // writes zeros for rows past `rows`. L2 promotion 256B: rows are read whole (not yet
  // measured against 128B).
  const CUresult result = encode_tiled()(&map, type, 4, const_cast<void*>(shape.data), dims, strides, box,
                                         element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(ErrorKind::Device,
                fmt::format("TMA: cuTensorMapEncodeTiled failed (CUresult {}) for dims ({}, {}, {}, {}), strides "
                            "({}, {}, {}) bytes, box ({}, {})",
                            static_cast<int>(result), dims[0], dims[1], dims[2], dims[3], strides[0], strides[1],
                            strides[2], box[0], box[1]));
  }
  return map;
}

}  // namespace

std::string tma_layout_problem(const void* data, std::int64_t batch_stride, std::int64_t row_stride,
                               std::int64_t head_stride, int element_bytes) {
  if (reinterpret_cast<std::uintptr_t>(data) % 16 != 0) {
    return fmt::format("base address {} is not 16-byte aligned", data);
  }
  const std::int64_t strides[3] = {batch_stride, row_stride, head_stride};
  const char* names[3] = {"batch", "seq", "head"};
  for (int i = 0; i < 3; ++i) {
    const std::int64_t bytes = strides[i] * element_bytes;
    if (strides[i] <= 0 || bytes % 16 != 0 || bytes >= kMaxStrideBytes) {
      return fmt::format("{} stride {} elements is not a positive multiple of {} elements (16 bytes) below 2^40 bytes",
                         names[i], strides[i], 16 / element_bytes);
    }
  }
  return {};
}

CUtensorMap make_tensor_map(const TensorMapShape& shape) {
  // A handful of live shapes at a time (3 operands per problem); old entries are overwritten
  // in turn. Encoding is host-only work, but it sits on every forward() of a benchmark loop.
  struct Entry {
    TensorMapShape shape;
    CUtensorMap map;
  };
  constexpr std::size_t kCapacity = 24;
  static std::mutex mutex;
  static std::vector<Entry> cache;
  static std::size_t next_slot = 0;

  const std::lock_guard<std::mutex> lock(mutex);
  for (const Entry& entry : cache)
    if (same_shape(entry.shape, shape)) return entry.map;
  const CUtensorMap map = encode(shape);
  if (cache.size() < kCapacity) {
    cache.push_back({shape, map});
  } else {
    cache[next_slot] = {shape, map};
    next_slot = (next_slot + 1) % kCapacity;
  }
  return map;
}

CUtensorMap make_tensor_map(const void* data, DType dtype, bool e4m3, int columns, int rows, int heads, int batch,
                            std::int64_t row_stride, std::int64_t head_stride, std::int64_t batch_stride,
                            int box_columns, int box_rows) {
  return make_tensor_map(TensorMapShape{.data = data,
                                        .dtype = dtype,
                                        .head_dim = columns,
                                        .rows = rows,
                                        .heads = heads,
                                        .batch = batch,
                                        .row_stride = row_stride,
                                        .head_stride = head_stride,
                                        .batch_stride = batch_stride,
                                        .box_rows = box_rows,
                                        .e4m3 = e4m3,
                                        .box_columns = box_columns});
}

}  // namespace attnsuite::cuda::hopper
