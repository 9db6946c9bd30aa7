// embedding's CUDA kernel; the schema and shape checks are in embedding.cc.
#include <vector>

#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "engine/ops/embedding.h"
#include "engine/ops/op_registry.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm_ggml.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const Tensor& ids = ctx.inputs[0];    // [n_tokens] i32, on the device
  const Tensor& table = ctx.inputs[1];  // [vocab, dim] f32 | f16 | bf16, or u8 GGUF blocks
  const Tensor& y = ctx.outputs[0];     // [n_tokens, dim] f32
  const int64_t n_tokens = ids.dim(0), vocab = table.dim(0);
  // u8: [vocab, row_bytes] blocks of the node's ggml_type (embedding.cc checked the type and that
  // rows are whole blocks; y.dim(1) is the row's element count).
  const GgmlType ggml_type = table.dtype() == DType::kU8 ? ctx.attrs_as<EmbeddingAttrs>().ggml_type
                                                         : GgmlType::kF32;
  SAMPAN_CHECK(table.dtype() != DType::kU8 || cuda::ggml_cuda_supported(ggml_type),
               ErrorCode::kUnsupported, "node '{}': GGUF {} embedding tables have no CUDA kernel",
               ctx.node.name, ggml_type_name(ggml_type) ? ggml_type_name(ggml_type) : "block");
  if (n_tokens == 0) return;
  SAMPAN_CHECK(table.is_contiguous() && ids.is_contiguous(), ErrorCode::kUnsupported,
               "embedding: a strided table {} or ids {} is not supported on CUDA", table.str(),
               ids.str());
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  // Ids come from users and must fail as on the CPU (kInvalidArgument naming the position), so
  // they are checked on the host: a 4-byte-per-token copy and one wait, at the first op of a
  // forward pass where the stream holds little else. Not in a recorded CUDA graph (a replay runs
  // no host code): the runtimes that record decode steps check their ids before the step
  // (CausalLm::forward, Engine::submit; sampled ids are in range by construction). The kernel
  // itself never reads through a bad id (its row is NaN), so memory stays safe either way.
  if (!ctx.capturing) {
    std::vector<int32_t> host(static_cast<size_t>(n_tokens));
    cuda_copy_async(host.data(), ids.raw(), host.size() * sizeof(int32_t), stream);
    cuda_stream_synchronize(stream, "embedding: reading the token ids");
    for (int64_t i = 0; i < n_tokens; ++i) {
      SAMPAN_CHECK(host[static_cast<size_t>(i)] >= 0 && host[static_cast<size_t>(i)] < vocab,
                   ErrorCode::kInvalidArgument,
                   "token id {} at position {} is outside the vocabulary [0, {})",
                   host[static_cast<size_t>(i)], i, vocab);
    }
  }
  if (table.dtype() == DType::kU8) {
    check_cuda(cuda::embedding_ggml(n_tokens, ids.data<int32_t>(), table.raw(), ggml_type, vocab,
                                    y.dim(1), y.data<float>(), row_stride(y), stream),
               "embedding launch");
    return;
  }
  check_cuda(cuda::embedding(n_tokens, ids.data<int32_t>(), table.raw(), table.dtype(), vocab,
                             table.dim(1), y.data<float>(), row_stride(y), stream),
             "embedding launch");
}

const RegisterKernel kCuda("embedding", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
