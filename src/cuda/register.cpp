#include "attnsuite/registry.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/flash2/flash2.hpp"
#include "cuda/sage/sage.hpp"
#include "cuda/sparge/sparge.hpp"
#include "cuda/vanilla/vanilla.hpp"
#if ATTNSUITE_HAVE_FLASH3
#include "cuda/flash3/flash3.hpp"
#endif

namespace attnsuite::cuda {

// The baseline first, then the fused kernels; nothing here touches the GPU.
void register_cuda_backends(Registry& registry) {
  registry.add("cuda-vanilla", make_cuda_vanilla_backend);
  registry.add("flash2", make_flash2_backend);
#if ATTNSUITE_HAVE_FLASH3
  registry.add("flash3", make_flash3_backend);
  registry.add("flash3-fp8", make_flash3_fp8_backend);
#endif
  // Block-sparse attention (issue 6) on flash3 (sm_90) or flash2: predicted, and with a given mask.
  registry.add("sparge", make_sparge_backend);
  registry.add("block-sparse", make_block_sparse_backend);
  register_flash2_variants(registry);
  registry.add("sage", make_sage_backend);
  registry.add("sage2", make_sage2_backend);
  // Predicted block-sparse attention on sage2's sm_90a kernel.
  registry.add("sparge-sage", make_sparge_sage_backend);
}

}  // namespace attnsuite::cuda
