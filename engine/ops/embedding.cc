// embedding(ids [n_tokens] i32, table [vocab, dim] f32|f16|bf16) -> [n_tokens, dim] f32
//
// A GGUF block-quantized table (attribute ggml_type, a GGUF type id) is u8
// [vocab, ggml_row_bytes(ggml_type, dim)]: each looked-up row is dequantized exactly as the
// reference does (kernels/cpu/ggml_dequant.h), so a quantized token_embd stays quantized in
// memory.
#include "engine/core/error.h"
#include "engine/ops/embedding.h"
#include "engine/ops/op_registry.h"
#include "kernels/common/ggml_type.h"
#include "kernels/cpu/embedding_cpu.h"
#include "kernels/cpu/ggml_dequant.h"

namespace sampan::ops {
namespace {

EmbeddingAttrs parse(const graph::Node& node) {
  EmbeddingAttrs a;
  const int64_t t = node.attrs.get_int("ggml_type", static_cast<int64_t>(GgmlType::kF32));
  SAMPAN_CHECK(t >= 0 && t <= 0xffff, ErrorCode::kInvalidArgument,
               "node '{}' (embedding): ggml_type {} is not a GGUF type id", node.name, t);
  a.ggml_type = static_cast<GgmlType>(t);
  return a;
}

// Elements per row of a u8 table of GGUF blocks; throws naming the node when it does not fit.
int64_t ggml_dim(const graph::Node& node, const EmbeddingAttrs& a, int64_t row_bytes) {
  const char* tn = ggml_type_name(a.ggml_type);
  SAMPAN_CHECK(ggml_block_type_supported(a.ggml_type), ErrorCode::kUnsupported,
               "node '{}': embedding table of GGUF type {} is not supported", node.name,
               tn ? std::string(tn) : std::to_string(static_cast<uint32_t>(a.ggml_type)));
  const int64_t ts = ggml_type_size(a.ggml_type);
  SAMPAN_CHECK(row_bytes % ts == 0, ErrorCode::kInvalidArgument,
               "node '{}': embedding rows of {} bytes are not whole {} blocks of {} bytes",
               node.name, row_bytes, tn, ts);
  return row_bytes / ts * ggml_block_size(a.ggml_type);
}

std::vector<TensorDesc> infer(const graph::Node& node, const EmbeddingAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 1);
  expect_dtype(node, in[0], 0, DType::kI32);
  expect_rank(node, in[1], 1, 2);
  if (in[1].dtype == DType::kU8) {
    return {{{in[0].shape[0], ggml_dim(node, a, in[1].shape[1])}, DType::kF32}};
  }
  SAMPAN_CHECK(in[1].dtype == DType::kF32 || in[1].dtype == DType::kF16 ||
                   in[1].dtype == DType::kBF16,
               ErrorCode::kUnsupported, "node '{}': embedding table of type {} is not supported",
               node.name, dtype_name(in[1].dtype));
  return {{{in[0].shape[0], in[1].shape[1]}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& ids = ctx.inputs[0];
  const Tensor& table = ctx.inputs[1];
  const int64_t vocab = table.dim(0);
  const int32_t* id = ids.data<int32_t>();
  // Ids come from users: check them here so the kernel can index without bounds checks.
  for (int64_t i = 0; i < ids.dim(0); ++i) {
    SAMPAN_CHECK(id[i] >= 0 && id[i] < vocab, ErrorCode::kInvalidArgument,
                 "token id {} at position {} is outside the vocabulary [0, {})", id[i], i, vocab);
  }
  const Tensor& y = ctx.outputs[0];
  if (table.dtype() == DType::kU8) {
    const auto& a = ctx.attrs_as<EmbeddingAttrs>();
    SAMPAN_CHECK(table.is_contiguous(), ErrorCode::kInternal, "node '{}': table not contiguous",
                 ctx.node.name);
    const int64_t row_bytes = table.dim(1), dim = y.dim(1), ldy = row_stride(y);
    const auto* base = static_cast<const uint8_t*>(table.raw());
    float* out = y.data<float>();
    // A handful of rows per forward (one per token): no threading needed.
    for (int64_t i = 0; i < ids.dim(0); ++i) {
      cpu::dequantize_ggml_row(a.ggml_type, base + id[i] * row_bytes, out + i * ldy, dim);
    }
    return;
  }
  cpu::embedding(ids.dim(0), id, table.raw(), table.dtype(), vocab, table.dim(1),
                 y.data<float>(), row_stride(y), ctx.runner);
}

const RegisterOp kSchema(with_attrs<EmbeddingAttrs>(
    {.name = "embedding", .min_inputs = 2, .max_inputs = 2}, {{"ggml_type", AttrType::kInt, false}},
    parse, infer));
const RegisterKernel kCpu("embedding", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
