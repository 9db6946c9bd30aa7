// matmul_packed(a [..., m, k] f32, w [ceil(n / nr), k, nr] f32 packed, bias [n] f32 (opt))
//   -> y [..., m, n] = act(alpha · a·B + bias)
// The form pack_matmul_weights gives a matmul by a constant 2-D b: B (b, or bᵀ for trans_b) is
// packed once into the panel layout of kernels/cpu/sgemm_packed_cpu.h, so a run neither copies
// the weights nor makes a second pass over y for bias and activation. Attributes: n (B's
// columns: the packed strips are padded to nr), alpha, activation (matmul's). A 1-D a is one
// row whose dimension y drops, as numpy does.
#include "engine/ops/matmul_packed.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/ops/matmul.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/sgemm_packed_cpu.h"

namespace sampan::ops {

int matmul_packed_width() { return cpu::sgemm_packed_nr(); }

Tensor pack_matmul_weight(const Tensor& b, bool trans_b, int nr) {
  SAMPAN_CHECK(b.rank() == 2 && b.dtype() == DType::kF32 && b.is_contiguous(),
               ErrorCode::kInternal, "pack_matmul_weight: b must be a contiguous 2-D f32 tensor");
  const int64_t k = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  Tensor packed = Tensor::empty({(n + nr - 1) / nr, k, nr}, DType::kF32);
  cpu::SerialRunner serial;
  cpu::sgemm_pack_b(b.data<float>(), k, n, b.dim(1), trans_b, nr, packed.data<float>(), serial);
  return packed;
}

namespace {

struct MatmulPackedAttrs final : OpAttrs {
  int64_t n = 0;
  float alpha = 1.0f;
  Activation activation = Activation::kNone;
};

MatmulPackedAttrs parse(const graph::Node& node) {
  const MatmulAttrs m = parse_matmul_attrs(node);  // alpha and activation, same rules
  MatmulPackedAttrs a;
  a.alpha = m.alpha;
  a.activation = m.activation;
  a.n = node.attrs.get_int("n", 0);
  SAMPAN_CHECK(a.n >= 1, ErrorCode::kInvalidArgument,
               "node '{}' (matmul_packed): attribute n = {}, expected >= 1", node.name, a.n);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const MatmulPackedAttrs& at,
                              const std::vector<TensorDesc>& in) {
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_dtype(node, in[1], 1, DType::kF32);
  expect_rank(node, in[1], 1, 3);
  const Shape& a = in[0].shape;
  const Shape& w = in[1].shape;
  SAMPAN_CHECK(!a.empty(), ErrorCode::kInvalidArgument,
               "node '{}' (matmul_packed): input 0 is a scalar, expected rank >= 1", node.name);
  const int64_t nr = w[2];
  SAMPAN_CHECK(nr >= 16 && nr <= 64 && nr % 16 == 0 && w[0] == (at.n + nr - 1) / nr,
               ErrorCode::kInvalidArgument,
               "node '{}' (matmul_packed): packed weight {} does not hold n = {} columns in "
               "strips of 16, 32, 48 or 64",
               node.name, shape_str(w), at.n);
  SAMPAN_CHECK(a.back() == w[1], ErrorCode::kInvalidArgument,
               "node '{}' (matmul_packed): input {} does not match the packed weight {} (k = {} "
               "and {})",
               node.name, shape_str(a), shape_str(w), a.back(), w[1]);
  if (in.size() > 2 && in[2].present) {
    expect_dtype(node, in[2], 2, DType::kF32);
    SAMPAN_CHECK(in[2].shape == Shape{at.n}, ErrorCode::kInvalidArgument,
                 "node '{}' (matmul_packed): input 2 (bias) has shape {}, expected [{}]",
                 node.name, shape_str(in[2].shape), at.n);
  }
  Shape y(a.begin(), a.end() - 1);
  y.push_back(at.n);
  return {{y, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const MatmulPackedAttrs& at = ctx.attrs_as<MatmulPackedAttrs>();
  const Tensor a = ctx.inputs[0].is_contiguous() ? ctx.inputs[0] : ctx.inputs[0].contiguous();
  const Tensor w = ctx.inputs[1].is_contiguous() ? ctx.inputs[1] : ctx.inputs[1].contiguous();
  const Tensor& y = ctx.outputs[0];
  SAMPAN_CHECK(y.is_contiguous(), ErrorCode::kInternal,
               "node '{}' (matmul_packed): output not contiguous", ctx.node.name);
  const float* bias = nullptr;
  Tensor hb;
  if (ctx.inputs.size() > 2 && ctx.inputs[2].defined()) {
    hb = ctx.inputs[2].is_contiguous() ? ctx.inputs[2] : ctx.inputs[2].contiguous();
    bias = hb.data<float>();
  }
  if (y.numel() == 0) return;
  const int64_t k = w.dim(1);
  const int64_t rows = y.numel() / at.n;
  if (k == 0) {  // numpy: an empty sum is 0
    std::fill(y.data<float>(), y.data<float>() + y.numel(), 0.0f);
    cpu::bias_activation(rows, at.n, y.data<float>(), at.n, 1.0f, bias, at.activation,
                         ctx.runner);
    return;
  }
  cpu::sgemm_packed(rows, at.n, k, a.data<float>(), k, w.data<float>(),
                    static_cast<int>(w.dim(2)), at.alpha, bias, at.activation, y.data<float>(),
                    at.n, ctx.runner);
}

const RegisterOp kSchema(with_attrs<MatmulPackedAttrs>({.name = "matmul_packed", .min_inputs = 2,
                                                        .max_inputs = 3},
                                                       {{"n", AttrType::kInt, true},
                                                        {"alpha", AttrType::kFloat, false},
                                                        {"activation", AttrType::kString, false}},
                                                       parse, infer));
const RegisterKernel kCpu("matmul_packed", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
