// linear_grad_input(dy [rows, n] f32, w_0, ..., w_{b-1}, bias_0, ..., scales_0, ...,
//                   zeros_0, ...) -> dx [rows, in_features] = dy · W
// The input gradient of `linear` (linear.cc) for its weights as they are: the same fixed slots
// after dy (a bias, if given, is ignored: it does not affect dx), and linear's attributes
// n_blocks, group_size, ggml_type. in_features (the forward's k) comes from the weights (for
// GGUF blocks: row bytes / block bytes * block size). Every weight format of linear: f32/f16/bf16,
// f8_e4m3, i4, GGUF blocks (kernels/cpu/linear_grad_cpu.h: dequantized a panel at a time, then the
// f32 GEMM). Attributes round_dy_bf16 / round_dx_bf16 (0/1, default 0): dy rounded to bf16
// (nearest even) before the product / dx after it, bit for bit a round_bf16 node before / after
// it; bf16 training folds such nodes in (train/train_graph.cc): the AMX tiles round while they
// pack dy and store dx.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/common/ggml_type.h"
#include "kernels/cpu/linear_grad_cpu.h"

namespace sampan::ops {
namespace {

struct LinearGradInputAttrs final : OpAttrs {
  int n_blocks = 1;
  int64_t group_size = 0;
  GgmlType ggml_type = GgmlType::kF32;
  bool round_dy = false;
  bool round_dx = false;
};

LinearGradInputAttrs parse(const graph::Node& node) {
  LinearGradInputAttrs a;
  const int64_t b = node.attrs.get_int("n_blocks", 1);
  const int64_t n_in = static_cast<int64_t>(node.inputs.size());
  SAMPAN_CHECK(b >= 1 && b <= kMaxGemmBlocks &&
                   (n_in == 1 + b || n_in == 1 + 2 * b || n_in == 1 + 3 * b || n_in == 1 + 4 * b),
               ErrorCode::kInvalidArgument,
               "node '{}' (linear_grad_input): {} inputs for {} weight blocks", node.name, n_in, b);
  a.n_blocks = static_cast<int>(b);
  a.group_size = node.attrs.get_int("group_size", 0);
  a.ggml_type =
      static_cast<GgmlType>(node.attrs.get_int("ggml_type", static_cast<int64_t>(GgmlType::kF32)));
  a.round_dy = flag_attr(node, "round_dy_bf16");
  a.round_dx = flag_attr(node, "round_dx_bf16");
  return a;
}

// The forward's k from a weight block's shape [rows, cols].
int64_t in_features(const graph::Node& node, const LinearGradInputAttrs& a, DType dtype,
                    int64_t cols) {
  if (dtype != DType::kU8) return cols;
  SAMPAN_CHECK(ggml_block_type_supported(a.ggml_type), ErrorCode::kUnsupported,
               "node '{}' (linear_grad_input): GGUF weight type {} is not supported", node.name,
               static_cast<int64_t>(a.ggml_type));
  const int64_t ts = ggml_type_size(a.ggml_type);
  SAMPAN_CHECK(cols % ts == 0, ErrorCode::kInvalidArgument,
               "node '{}' (linear_grad_input): weight rows of {} bytes are not whole blocks of {}",
               node.name, cols, ts);
  return cols / ts * ggml_block_size(a.ggml_type);
}

std::vector<TensorDesc> infer(const graph::Node& node, const LinearGradInputAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  int64_t n = 0;
  int64_t k = -1;
  for (int i = 0; i < a.n_blocks; ++i) {
    const TensorDesc& w = in[static_cast<size_t>(1 + i)];
    SAMPAN_CHECK(w.present, ErrorCode::kInvalidArgument,
                 "node '{}' (linear_grad_input): weight {} is missing", node.name, i);
    expect_rank(node, w, 1 + i, 2);
    const bool float_w =
        w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16;
    SAMPAN_CHECK(
        float_w || w.dtype == DType::kF8E4M3 || w.dtype == DType::kI4 || w.dtype == DType::kU8,
        ErrorCode::kUnsupported,
        "node '{}' (linear_grad_input): weights of type {} are not supported", node.name,
        dtype_name(w.dtype));
    if (k < 0) k = in_features(node, a, w.dtype, w.shape[1]);
    expect_dim(node, w, 1 + i, 1, in[1].shape[1]);
    n += w.shape[0];
  }
  expect_dim(node, in[0], 0, 1, n);
  return {{{in[0].shape[0], k}, DType::kF32}};
}

const void* slot_data(const KernelContext& ctx, size_t idx) {
  if (idx >= ctx.inputs.size() || !ctx.inputs[idx].defined() || ctx.inputs[idx].numel() == 0) {
    return nullptr;
  }
  SAMPAN_CHECK(ctx.inputs[idx].is_contiguous(), ErrorCode::kInternal,
               "node '{}': input {} not contiguous", ctx.node.name, idx);
  return ctx.inputs[idx].raw();
}

void run_cpu(const KernelContext& ctx) {
  const auto& a = ctx.attrs_as<LinearGradInputAttrs>();
  const int b = a.n_blocks;
  GemmWeights w;
  w.dtype = ctx.inputs[1].dtype();
  const Tensor& dx = ctx.outputs[0];
  w.k = dx.dim(1);
  w.n_blocks = b;
  w.group_size = a.group_size;
  w.ggml_type = a.ggml_type;
  for (int i = 0; i < b; ++i) {
    w.data[i] = slot_data(ctx, static_cast<size_t>(1 + i));
    w.rows[i] = ctx.inputs[static_cast<size_t>(1 + i)].dim(0);
    const size_t s = static_cast<size_t>(1 + 2 * b + i), z = static_cast<size_t>(1 + 3 * b + i);
    w.scales[i] = slot_data(ctx, s);
    if (w.scales[i] != nullptr && w.dtype == DType::kI4) w.scale_dtype = ctx.inputs[s].dtype();
    w.zeros[i] = static_cast<const int8_t*>(slot_data(ctx, z));
    SAMPAN_CHECK(w.scales[i] != nullptr || (w.dtype != DType::kF8E4M3 && w.dtype != DType::kI4),
                 ErrorCode::kInvalidArgument,
                 "node '{}' (linear_grad_input): quantized weight {} has no scales", ctx.node.name,
                 i);
  }
  const Tensor& dy = ctx.inputs[0];
  cpu::linear_grad_input(dy.dim(0), dy.data<float>(), row_stride(dy), w, dx.data<float>(),
                         row_stride(dx), ctx.runner, a.round_dy, a.round_dx);
}

const RegisterOp kSchema(with_attrs<LinearGradInputAttrs>(
    {.name = "linear_grad_input", .min_inputs = 2, .max_inputs = 1 + 4 * kMaxGemmBlocks},
    {{"n_blocks", AttrType::kInt, false},
     {"group_size", AttrType::kInt, false},
     {"ggml_type", AttrType::kInt, false},
     {"round_dy_bf16", AttrType::kInt, false},
     {"round_dx_bf16", AttrType::kInt, false}},
    parse, infer));
const RegisterKernel kCpu("linear_grad_input", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
