// Block-sparse flash2 forward, bf16, head dim 128: one instantiation per translation unit.
#include "cuda/sparge/sparse_launch.cuh"

namespace attnsuite::cuda::sparge {
template void run_block_sparse<__nv_bfloat16, 128>(const flash2::SparseParams& params, cudaStream_t stream);
}  // namespace attnsuite::cuda::sparge
