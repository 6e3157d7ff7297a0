// `cuda-vanilla`: attention as PyTorch's math path computes it on a GPU, the baseline the fused
// kernels are measured against. S = scale·Q·Kᵀ for every (batch, q head) by cuBLAS strided
// batched GEMMs into one materialized B·Hq·Nq·Nk buffer in the input dtype (fp32 accumulate),
// a masked row softmax in place (P in the input dtype), then O = P·V by cuBLAS. The scores
// buffer goes through the tracking allocator, so its O(N²) memory shows in the results.
//
// Layouts and GQA: cuBLAS sees each head as a column-major matrix whose leading dimension is
// the view's seq stride, so BSHD (ld = heads·dim) and BHSD (ld = dim) need no copy. One
// strided-batched call covers the kv heads for one q-head offset g within the group: q head
// kv·group + g has a constant stride (group·head stride) over kv, so GQA/MQA needs no K/V
// expansion. The batch dim folds into the same call when the views are dense over (batch,
// heads) — BHSD — else it is one call per batch. That is B·group calls of each GEMM at worst.
#include "cuda/vanilla/vanilla.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>

#include "attnsuite/error.hpp"
#include "cuda/common/attention_params.hpp"
#include "cuda/common/backend_support.hpp"
#include "cuda/common/check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/cuda_backends.hpp"
#include "cuda/vanilla/softmax.hpp"

namespace attnsuite::cuda {
namespace {

cudaDataType_t cuda_data_type(DType dtype) { return dtype == DType::F16 ? CUDA_R_16F : CUDA_R_16BF; }

class CublasHandle {
 public:
  CublasHandle() = default;
  ~CublasHandle() {
    if (handle_ != nullptr) cublasDestroy(handle_);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  // The handle for the current device (made again if the current device changed).
  cublasHandle_t get() {
    int device = 0;
    ATTNSUITE_CUDA_CHECK(cudaGetDevice(&device));
    if (handle_ != nullptr && device != device_) {
      cublasDestroy(handle_);
      handle_ = nullptr;
    }
    if (handle_ == nullptr) {
      ATTNSUITE_CUDA_CHECK(cublasCreate(&handle_));
      device_ = device;
    }
    return handle_;
  }

 private:
  cublasHandle_t handle_ = nullptr;
  int device_ = -1;
};

class CudaVanillaBackend final : public IdentifiedBackend {
 public:
  CudaVanillaBackend()
      : IdentifiedBackend({"cuda-vanilla",
                           "vanilla attention (attnsuite, cuBLAS + softmax kernel)",
                           {DeviceType::Cuda, 0},
                           "fp16/bf16, materializes B·Hq·Nq·Nk scores in the input dtype, causal, window, GQA/MQA, "
                           "any head dim, BSHD/BHSD"}) {}

  Support supports(const AttentionProblem& problem) const override {
    Support support = supports_problem_common(name(), problem);
    if (!support) return support;
    return supports_device(name());
  }

  std::unique_ptr<KernelPlan> plan(const AttentionProblem& problem, const PlanOptions& options) const override {
    require_support(*this, problem);
    choose_kernel_config(*this, problem, options);  // refuses a config: there is none
    // The cuBLAS handle is the plan's (a handle is bound to the stream of the run that uses it),
    // made here on the current device so that its memory is not part of the first run's.
    auto cublas = std::make_shared<CublasHandle>();
    (void)cublas->get();
    return std::make_unique<FunctionPlan>(
        "", 0, [this, problem, cublas](const AttentionArgs& args, Stream stream, RunReport&) {
          run(problem, args, stream, *cublas);
        });
  }

 private:
  void run(const AttentionProblem& problem, const AttentionArgs& args, Stream stream, CublasHandle& cublas) const {
    check_cuda_args(name(), problem, args);

    const std::int64_t batch = problem.batch, heads_q = problem.heads_q, heads_kv = problem.heads_kv;
    const std::int64_t group = problem.group_size();
    const std::int64_t seq_q = problem.seq_q, seq_kv = problem.seq_kv;
    const std::int64_t score_elements = seq_q * seq_kv;
    const std::size_t element_bytes = size_of(problem.dtype);
    DeviceBuffer scores(static_cast<std::size_t>(batch * heads_q * score_elements) * element_bytes);

    cublasHandle_t handle = cublas.get();
    auto cuda_stream = static_cast<cudaStream_t>(stream);
    ATTNSUITE_CUDA_CHECK(cublasSetStream(handle, cuda_stream));
    const cudaDataType_t type = cuda_data_type(problem.dtype);
    const float scale = problem.softmax_scale(), one = 1.0f, zero = 0.0f;

    const auto& q = args.q.strides;
    const auto& k = args.k.strides;
    const auto& v = args.v.strides;
    const auto& o = args.o.strides;
    const bool fold_batch = batch == 1 || (q[0] == heads_q * q[2] && k[0] == heads_kv * k[2] &&
                                           v[0] == heads_kv * v[2] && o[0] == heads_q * o[2]);
    const std::int64_t calls_over_batch = fold_batch ? 1 : batch;
    const int batch_count = static_cast<int>(fold_batch ? batch * heads_kv : heads_kv);
    auto* score_base = static_cast<unsigned char*>(scores.data());
    auto element = [&](const TensorView& view, std::int64_t offset) {
      return static_cast<unsigned char*>(view.data) + offset * static_cast<std::int64_t>(element_bytes);
    };

    for (std::int64_t b = 0; b < calls_over_batch; ++b) {
      for (std::int64_t g = 0; g < group; ++g) {
        void* s = score_base + ((b * heads_q + g) * score_elements) * static_cast<std::int64_t>(element_bytes);
        // Column-major: Sᵀ (Nk × Nq) = Kᵀ·Q, K seen as D × Nk with ld = K's seq stride.
        ATTNSUITE_CUDA_CHECK(cublasGemmStridedBatchedEx(
            handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(seq_kv), static_cast<int>(seq_q), problem.head_dim,
            &scale, element(args.k, b * k[0]), type, static_cast<int>(k[1]), k[2], element(args.q, b * q[0] + g * q[2]),
            type, static_cast<int>(q[1]), group * q[2], &zero, s, type, static_cast<int>(seq_kv),
            group * score_elements, batch_count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
    }

    vanilla::SoftmaxParams softmax;
    softmax.scores = scores.data();
    softmax.lse = args.lse.data;
    softmax.rows = batch * heads_q * seq_q;
    softmax.seq_q = problem.seq_q;
    softmax.seq_kv = problem.seq_kv;
    fill_window(softmax, problem);
    vanilla::launch_masked_softmax(softmax, problem.dtype, stream);

    for (std::int64_t b = 0; b < calls_over_batch; ++b) {
      for (std::int64_t g = 0; g < group; ++g) {
        const void* p = score_base + ((b * heads_q + g) * score_elements) * static_cast<std::int64_t>(element_bytes);
        // Column-major: Oᵀ (Dv × Nq) = Vᵀ·Pᵀ, V seen as Dv × Nk, P as Nk × Nq.
        ATTNSUITE_CUDA_CHECK(cublasGemmStridedBatchedEx(
            handle, CUBLAS_OP_N, CUBLAS_OP_N, problem.dim_v(), static_cast<int>(seq_q), static_cast<int>(seq_kv), &one,
            element(args.v, b * v[0]), type, static_cast<int>(v[1]), v[2], p, type, static_cast<int>(seq_kv),
            group * score_elements, &zero, element(args.o, b * o[0] + g * o[2]), type, static_cast<int>(o[1]),
            group * o[2], batch_count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
    }
    vanilla::ZeroRowsParams zero_rows;
    copy_view(args.o, zero_rows.o, zero_rows.stride_batch, zero_rows.stride_seq, zero_rows.stride_head);
    zero_rows.batch = problem.batch;
    zero_rows.heads_q = problem.heads_q;
    zero_rows.dim_v = problem.dim_v();
    zero_rows.seq_q = problem.seq_q;
    zero_rows.seq_kv = problem.seq_kv;
    fill_window(zero_rows, problem);
    // Key ranges move monotonically with the query, so the first and the last query are the
    // ones that can see no key; without such a row there is nothing to zero.
    const auto unseen = [&](int query) { return problem.key_begin(query) >= problem.key_end(query); };
    if (problem.seq_q > 0 && (unseen(0) || unseen(problem.seq_q - 1)))
      vanilla::launch_zero_unseen_rows(zero_rows, problem.dtype, stream);
    // The scores must outlive the queued GEMM that reads them: wait before the buffer is freed.
    // (Caching it across calls would hide its N² bytes from the per-forward peak memory.)
    ATTNSUITE_CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
  }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_vanilla_backend() { return std::make_unique<CudaVanillaBackend>(); }

}  // namespace attnsuite::cuda
