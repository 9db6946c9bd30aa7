// linear(x [rows, k] f32, w_0 [n_0, k], ..., w_{b-1}, [bias_0 [n_0], ..., bias_{b-1}]) -> y
//
// Attributes: n_blocks = b (default 1, at most 3), epilogue = "store" (default) | "silu_mul".
// The weights are one virtual matrix, concatenated along the output dimension without copying
// (fused Q/K/V, fused gate/up). "store": y is [rows, n_0 + ... + n_{b-1}]; "silu_mul" (b == 2,
// n_0 == n_1): y = silu(x·w_0ᵀ + bias_0) * (x·w_1ᵀ + bias_1), [rows, n_0]. Biases are f32 and
// may be absent (kNoValue) individually.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/gemm_cpu.h"

namespace sampan::ops {
namespace {

int n_blocks(const graph::Node& node) {
  const int64_t b = node.attrs.get_int("n_blocks", 1);
  SAMPAN_CHECK(b >= 1 && b <= cpu::kMaxGemmBlocks, ErrorCode::kInvalidArgument,
               "node '{}' (linear): n_blocks = {} outside 1..{}", node.name, b,
               cpu::kMaxGemmBlocks);
  const int64_t n_in = static_cast<int64_t>(node.inputs.size());
  SAMPAN_CHECK(n_in == 1 + b || n_in == 1 + 2 * b, ErrorCode::kInvalidArgument,
               "node '{}' (linear): {} inputs for {} weight blocks", node.name, n_in, b);
  return static_cast<int>(b);
}

bool silu_mul_epilogue(const graph::Node& node) {
  const std::string ep = node.attrs.get_string("epilogue", "store");
  SAMPAN_CHECK(ep == "store" || ep == "silu_mul", ErrorCode::kInvalidArgument,
               "node '{}' (linear): unknown epilogue '{}'", node.name, ep);
  return ep == "silu_mul";
}

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  const int b = n_blocks(node);
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  const int64_t k = in[0].shape[1];
  int64_t n = 0;
  for (int i = 0; i < b; ++i) {
    const TensorDesc& w = in[static_cast<size_t>(1 + i)];
    expect_rank(node, w, 1 + i, 2);
    SAMPAN_CHECK(w.dtype == in[1].dtype, ErrorCode::kInvalidArgument,
                 "node '{}' (linear): weight blocks mix {} and {}", node.name,
                 dtype_name(in[1].dtype), dtype_name(w.dtype));
    SAMPAN_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16,
                 ErrorCode::kUnsupported, "node '{}' (linear): weights of type {} are not supported",
                 node.name, dtype_name(w.dtype));
    expect_dim(node, w, 1 + i, 1, k);
    n += w.shape[0];
    const size_t bi = static_cast<size_t>(1 + b + i);
    if (bi < in.size() && in[bi].present) {
      expect_rank(node, in[bi], static_cast<int>(bi), 1);
      expect_dtype(node, in[bi], static_cast<int>(bi), DType::kF32);
      expect_dim(node, in[bi], static_cast<int>(bi), 0, w.shape[0]);
    }
  }
  if (silu_mul_epilogue(node)) {
    SAMPAN_CHECK(b == 2 && in[1].shape[0] == in[2].shape[0], ErrorCode::kInvalidArgument,
                 "node '{}' (linear): silu_mul needs two weight blocks of equal rows", node.name);
    n = in[1].shape[0];
  }
  return {{{in[0].shape[0], n}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const int b = n_blocks(ctx.node);
  const Tensor& x = ctx.inputs[0];
  cpu::GemmWeights w;
  w.dtype = ctx.inputs[1].dtype();
  w.k = x.dim(1);
  w.n_blocks = b;
  for (int i = 0; i < b; ++i) {
    const Tensor& wi = ctx.inputs[static_cast<size_t>(1 + i)];
    SAMPAN_CHECK(wi.is_contiguous(), ErrorCode::kInternal, "node '{}': weight {} not contiguous",
                 ctx.node.name, i);
    w.data[i] = wi.raw();
    w.rows[i] = wi.dim(0);
    const size_t bi = static_cast<size_t>(1 + b + i);
    if (bi < ctx.inputs.size() && ctx.inputs[bi].defined() && ctx.inputs[bi].numel() > 0) {
      w.bias[i] = ctx.inputs[bi].data<float>();
    }
  }
  const Tensor& y = ctx.outputs[0];
  cpu::gemm(x.dim(0), x.data<float>(), row_stride(x), w,
            silu_mul_epilogue(ctx.node) ? cpu::GemmEpilogue::kSiluMul : cpu::GemmEpilogue::kStore,
            y.data<float>(), row_stride(y), ctx.runner);
}

const RegisterOp kSchema({.name = "linear", .min_inputs = 2, .max_inputs = 1 + 2 * cpu::kMaxGemmBlocks,
                          .infer = infer});
const RegisterKernel kCpu("linear", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
