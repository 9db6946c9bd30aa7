// linear(x [rows, k] f32, w_0 [n_0, k], ..., w_{b-1}, bias_0 [n_0], ..., bias_{b-1},
//        scales_0, ..., scales_{b-1}, zeros_0, ..., zeros_{b-1}) -> y
//
// Fixed slots: input 1 + i is block i's weight, 1 + b + i its bias, 1 + 2b + i its scales,
// 1 + 3b + i its zero points; an absent one is kNoValue, and trailing groups of slots may be left
// out altogether (1 + b, 1 + 2b, 1 + 3b or 1 + 4b inputs).
// Attributes: n_blocks = b (default 1, at most 3), epilogue = "store" (default) | "silu_mul",
// group_size (int4 only).
// The weights are one virtual matrix, concatenated along the output dimension without copying
// (fused Q/K/V, fused gate/up). "store": y is [rows, n_0 + ... + n_{b-1}]; "silu_mul" (b == 2,
// n_0 == n_1): y = silu(x·w_0ᵀ + bias_0) * (x·w_1ᵀ + bias_1), [rows, n_0]. Biases are f32.
// Weights: f32, f16, bf16, or quantized (kernels/cpu/gemm_cpu.h, every block the same format):
//   f8_e4m3 [n_i, k] with scales_i f32 [n_i];
//   i4 [n_i, k] (packed) with scales_i f16|bf16 [n_i, k / group_size] (one scale type for all
//   blocks) and optional zeros_i i8 [n_i, k / group_size];
//   u8 [n_i, ggml_row_bytes(ggml_type, k)]: rows of GGUF blocks (attribute ggml_type, the GGUF
//   type id, one for every block; kernels/common/ggml_type.h), no scales or zeros.
#include "engine/ops/linear.h"

#include <memory>
#include <optional>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/common/quant_scheme.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/round_bf16_cpu.h"

namespace sampan::ops {
namespace {

LinearAttrs parse(const graph::Node& node) {
  return parse_linear_attrs(node, static_cast<int64_t>(node.inputs.size()));
}

}  // namespace

LinearAttrs parse_linear_attrs(const graph::Node& node, int64_t n_slots) {
  LinearAttrs a;
  const int64_t b = node.attrs.get_int("n_blocks", 1);
  SAMPAN_CHECK(b >= 1 && b <= cpu::kMaxGemmBlocks, ErrorCode::kInvalidArgument,
               "node '{}' (linear): n_blocks = {} outside 1..{}", node.name, b,
               cpu::kMaxGemmBlocks);
  const int64_t n_in = n_slots;
  SAMPAN_CHECK(n_in == 1 + b || n_in == 1 + 2 * b || n_in == 1 + 3 * b || n_in == 1 + 4 * b,
               ErrorCode::kInvalidArgument, "node '{}' (linear): {} inputs for {} weight blocks",
               node.name, n_in, b);
  a.n_blocks = static_cast<int>(b);
  const std::string ep = node.attrs.get_string("epilogue", "store");
  SAMPAN_CHECK(ep == "store" || ep == "silu_mul", ErrorCode::kInvalidArgument,
               "node '{}' (linear): unknown epilogue '{}'", node.name, ep);
  a.epilogue = ep == "silu_mul" ? GemmEpilogue::kSiluMul : GemmEpilogue::kStore;
  a.group_size = node.attrs.get_int("group_size", 0);
  const int64_t t = node.attrs.get_int("ggml_type", static_cast<int64_t>(GgmlType::kF32));
  SAMPAN_CHECK(t >= 0 && t <= 0xffff, ErrorCode::kInvalidArgument,
               "node '{}' (linear): ggml_type {} is not a GGUF type id", node.name, t);
  a.ggml_type = static_cast<GgmlType>(t);
  a.bf16_operands = flag_attr(node, "bf16_operands");
  a.round_x = flag_attr(node, "round_x_bf16");
  return a;
}

namespace {

enum class Slot { kBias = 1, kScales = 2, kZeros = 3 };

size_t slot(int b, int i, Slot s) { return static_cast<size_t>(1 + static_cast<int>(s) * b + i); }

const char* slot_name(Slot s) {
  switch (s) {
    case Slot::kBias: return "bias";
    case Slot::kScales: return "scales";
    case Slot::kZeros: return "zeros";
  }
  return "?";
}

bool quantized(DType t) { return t == DType::kF8E4M3 || t == DType::kI4 || t == DType::kU8; }

// Checks one optional slot of block i: `want` says whether it must be present, absent, or may be
// either; when present it must be `dtype` with `shape`.
enum class Need { kAbsent, kRequired, kOptional };
void check_slot(const graph::Node& node, const std::vector<TensorDesc>& in, int b, int i, Slot s,
                Need need, DType dtype, const Shape& shape, const char* format) {
  const size_t idx = slot(b, i, s);
  const bool here = idx < in.size() && in[idx].present;
  const int index = static_cast<int>(idx);
  if (!here) {
    SAMPAN_CHECK(need != Need::kRequired, ErrorCode::kInvalidArgument,
                 "node '{}' (linear): input {} ({}_{}) is missing; {} weights need it", node.name,
                 index, slot_name(s), i, format);
    return;
  }
  SAMPAN_CHECK(need != Need::kAbsent, ErrorCode::kInvalidArgument,
               "node '{}' (linear): input {} ({}_{}) is given but {} weights take none", node.name,
               index, slot_name(s), i, format);
  SAMPAN_CHECK(in[idx].dtype == dtype && in[idx].shape == shape, ErrorCode::kInvalidArgument,
               "node '{}' (linear): input {} ({}_{}) is {}{}, expected {}{}", node.name, index,
               slot_name(s), i, dtype_name(in[idx].dtype), shape_str(in[idx].shape),
               dtype_name(dtype), shape_str(shape));
}

}  // namespace

std::vector<TensorDesc> infer_linear(const graph::Node& node, const LinearAttrs& a,
                                     const std::vector<TensorDesc>& in) {
  const int b = a.n_blocks;
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  const int64_t k = in[0].shape[1];
  const DType wtype = in[1].dtype;
  const int64_t g = a.group_size;
  if (wtype == DType::kI4) {
    SAMPAN_CHECK(int4_group_size_ok(g), ErrorCode::kInvalidArgument,
                 "node '{}' (linear): int4 weights need group_size 32, 64 or 128, got {}",
                 node.name, g);
    SAMPAN_CHECK(k % g == 0, ErrorCode::kInvalidArgument,
                 "node '{}' (linear): input width {} is not a multiple of the int4 group size {}",
                 node.name, k, g);
  }
  if (wtype == DType::kU8) {
    const char* tn = ggml_type_name(a.ggml_type);
    SAMPAN_CHECK(ggml_block_type_supported(a.ggml_type), ErrorCode::kUnsupported,
                 "node '{}' (linear): GGUF weight type {} is not supported", node.name,
                 tn ? std::string(tn) : std::to_string(static_cast<uint32_t>(a.ggml_type)));
    SAMPAN_CHECK(k % ggml_block_size(a.ggml_type) == 0, ErrorCode::kInvalidArgument,
                 "node '{}' (linear): input width {} is not a multiple of {}'s block of {}",
                 node.name, k, tn, ggml_block_size(a.ggml_type));
  }
  DType scale_type = DType::kF16;
  if (wtype == DType::kI4) {
    const size_t s0 = slot(b, 0, Slot::kScales);
    if (s0 < in.size() && in[s0].present) scale_type = in[s0].dtype;
    SAMPAN_CHECK(scale_type == DType::kF16 || scale_type == DType::kBF16,
                 ErrorCode::kInvalidArgument,
                 "node '{}' (linear): input {} (scales_0) is {}, expected f16 or bf16", node.name,
                 s0, dtype_name(scale_type));
  }
  int64_t n = 0;
  for (int i = 0; i < b; ++i) {
    const TensorDesc& w = in[static_cast<size_t>(1 + i)];
    SAMPAN_CHECK(w.present, ErrorCode::kInvalidArgument,
                 "node '{}' (linear): input {} (weight {}) is missing", node.name, 1 + i, i);
    expect_rank(node, w, 1 + i, 2);
    SAMPAN_CHECK(w.dtype == wtype, ErrorCode::kInvalidArgument,
                 "node '{}' (linear): weight blocks mix {} and {}", node.name, dtype_name(wtype),
                 dtype_name(w.dtype));
    SAMPAN_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16 ||
                     quantized(w.dtype),
                 ErrorCode::kUnsupported, "node '{}' (linear): weights of type {} are not supported",
                 node.name, dtype_name(w.dtype));
    expect_dim(node, w, 1 + i, 1, w.dtype == DType::kU8 ? ggml_row_bytes(a.ggml_type, k) : k);
    const int64_t rows = w.shape[0];
    n += rows;
    check_slot(node, in, b, i, Slot::kBias, Need::kOptional, DType::kF32, {rows}, "");
    switch (w.dtype) {
      case DType::kF8E4M3:
        check_slot(node, in, b, i, Slot::kScales, Need::kRequired, DType::kF32, {rows}, "f8_e4m3");
        check_slot(node, in, b, i, Slot::kZeros, Need::kAbsent, DType::kI8, {}, "f8_e4m3");
        break;
      case DType::kI4:
        check_slot(node, in, b, i, Slot::kScales, Need::kRequired, scale_type, {rows, k / g}, "i4");
        check_slot(node, in, b, i, Slot::kZeros, Need::kOptional, DType::kI8, {rows, k / g}, "i4");
        break;
      case DType::kU8:
        check_slot(node, in, b, i, Slot::kScales, Need::kAbsent, DType::kF32, {}, "GGUF block");
        check_slot(node, in, b, i, Slot::kZeros, Need::kAbsent, DType::kI8, {}, "GGUF block");
        break;
      default:
        check_slot(node, in, b, i, Slot::kScales, Need::kAbsent, DType::kF32, {}, "float");
        check_slot(node, in, b, i, Slot::kZeros, Need::kAbsent, DType::kI8, {}, "float");
        break;
    }
  }
  if (a.epilogue == GemmEpilogue::kSiluMul) {
    SAMPAN_CHECK(b == 2 && in[1].shape[0] == in[2].shape[0], ErrorCode::kInvalidArgument,
                 "node '{}' (linear): silu_mul needs two weight blocks of equal rows", node.name);
    n = in[1].shape[0];
  }
  return {{{in[0].shape[0], n}, DType::kF32}};
}

namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const LinearAttrs& a,
                              const std::vector<TensorDesc>& in) {
  return infer_linear(node, a, in);
}

// The tensor in a slot, or nullptr when absent.
const Tensor* slot_tensor(const KernelContext& ctx, int b, int i, Slot s) {
  const size_t idx = slot(b, i, s);
  if (idx >= ctx.inputs.size() || !ctx.inputs[idx].defined() || ctx.inputs[idx].numel() == 0) {
    return nullptr;
  }
  SAMPAN_CHECK(ctx.inputs[idx].is_contiguous(), ErrorCode::kInternal,
               "node '{}': {}_{} not contiguous", ctx.node.name, slot_name(s), i);
  return &ctx.inputs[idx];
}

void run_cpu(const KernelContext& ctx) {
  const LinearAttrs& a = ctx.attrs_as<LinearAttrs>();
  const Tensor& y = ctx.outputs[0];
  linear_rows_cpu(ctx, a, linear_weights(ctx, a), 0, ctx.inputs[0].dim(0), y.data<float>(),
                  row_stride(y));
}

const RegisterOp kSchema(with_attrs<LinearAttrs>(
    {.name = "linear", .min_inputs = 2, .max_inputs = 1 + 4 * cpu::kMaxGemmBlocks},
    {{"n_blocks", AttrType::kInt, false},
     {"epilogue", AttrType::kString, false},
     {"group_size", AttrType::kInt, false},
     {"ggml_type", AttrType::kInt, false},
     {"bf16_operands", AttrType::kInt, false},
     {"round_x_bf16", AttrType::kInt, false}},
    parse, infer));
const RegisterKernel kCpu("linear", DeviceType::kCPU, run_cpu);

}  // namespace

GemmWeights linear_weights(const KernelContext& ctx, const LinearAttrs& a) {
  const int b = a.n_blocks;
  cpu::GemmWeights w;
  w.dtype = ctx.inputs[1].dtype();
  w.k = ctx.inputs[0].dim(1);
  w.n_blocks = b;
  w.group_size = a.group_size;
  w.ggml_type = a.ggml_type;
  for (int i = 0; i < b; ++i) {
    const Tensor& wi = ctx.inputs[static_cast<size_t>(1 + i)];
    SAMPAN_CHECK(wi.is_contiguous(), ErrorCode::kInternal, "node '{}': weight {} not contiguous",
                 ctx.node.name, i);
    w.data[i] = wi.raw();
    w.rows[i] = wi.dim(0);
    if (const Tensor* bias = slot_tensor(ctx, b, i, Slot::kBias)) w.bias[i] = bias->data<float>();
    if (const Tensor* s = slot_tensor(ctx, b, i, Slot::kScales)) {
      w.scales[i] = s->raw();
      if (w.dtype == DType::kI4) w.scale_dtype = s->dtype();
    }
    if (const Tensor* z = slot_tensor(ctx, b, i, Slot::kZeros)) w.zeros[i] = z->data<int8_t>();
  }
  return w;
}

void linear_rows_cpu(const KernelContext& ctx, const LinearAttrs& a, const GemmWeights& w,
                     int64_t row0, int64_t rows, float* y, int64_t ldy) {
  const Tensor& x = ctx.inputs[0];
  std::optional<cpu::ScopedGemmPrecision> bf16;
  const bool bf16_products = a.bf16_operands &&
                             (w.dtype == DType::kBF16 || w.dtype == DType::kF32) &&
                             cpu::gemm_precision() != cpu::GemmPrecision::kF32;
  if (bf16_products) bf16.emplace(cpu::GemmPrecision::kBf16);
  int64_t ldx = row_stride(x);
  const float* xp = x.data<float>() + row0 * ldx;
  std::unique_ptr<float[]> rounded;  // uninitialized: round_bf16 writes every element
  if (a.round_x && !(bf16_products && cpu::gemm_rounds_x_to_bf16(rows, w))) {
    rounded = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(rows * x.dim(1)));
    cpu::round_bf16(rows, x.dim(1), xp, ldx, rounded.get(), x.dim(1), ctx.runner);
    xp = rounded.get();
    ldx = x.dim(1);
  }
  cpu::gemm(rows, xp, ldx, w, a.epilogue, y, ldy, ctx.runner);
}

}  // namespace sampan::ops
