// matmul(a [..., m, k] f32, b [..., k, n] f32 (or [n, k] with trans_b, 2-D only), bias [n] f32
// (opt)) -> [batch..., m, n]; y = act(alpha * a·b + bias). numpy semantics: the batch dims
// broadcast, a 1-D a is [1, k] with that dim dropped from y, a 1-D b is [k, 1] likewise.
//
// Every product runs on the linear GEMM (kernels/cpu/gemm_cpu.h), which wants the weights as
// W = bᵀ [n, k]:
//  - b of rank <= 2 (a Linear layer, b usually a constant): all of a's rows form one GEMM. With
//    trans_b (or a 1-D b) b already is W and goes to the linear GEMM; a b [k, n] runs
//    as a 1x1 convolution on the conv GEMM (kernels/cpu/conv_cpu.h), which reads b as it is.
//  - b with batch dims (attention's q·kᵀ and p·v): per batch item, alpha·bᵀ into per-thread
//    scratch (k·n floats, small next to the m·k·n product) and one GEMM; items run in parallel
//    on one worker each when there are enough of them, else one by one on all workers.
// The bias rides in the GEMM's own epilogue; alpha is folded into W where W is built here, and
// the activation (and alpha when b is used as is) is one vector pass over y afterwards.
// precision "bf16" (a constant 2-D b converted to bf16 by convert_precision_bf16): the same 1x1
// conv form on bf16-rounded inputs with f32 sums (cpu::matmul_bf16).
#include "engine/ops/matmul.h"

#include <algorithm>

#include "kernels/cpu/conv_cpu.h"
#include <cstring>
#include <memory>
#include <mutex>

#include "engine/core/error.h"
#include "engine/ops/broadcast.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::ops {
namespace {

// out [n, k] = alpha * bᵀ for rows [n0, n1) of out; b [k, n] with row stride ldb. Tiled so that
// both sides stay within a few cache lines per tile.
void transpose_scaled(const float* b, int64_t k, int64_t n, int64_t ldb, float alpha,
                      float* out, int64_t n0, int64_t n1) {
  constexpr int64_t kTile = 16;
  for (int64_t j0 = n0; j0 < n1; j0 += kTile) {
    const int64_t j1 = std::min(n1, j0 + kTile);
    for (int64_t i0 = 0; i0 < k; i0 += kTile) {
      const int64_t i1 = std::min(k, i0 + kTile);
      for (int64_t j = j0; j < j1; ++j) {
        float* o = out + j * k;
        for (int64_t i = i0; i < i1; ++i) o[i] = alpha * b[i * ldb + j];
      }
    }
  }
}


const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
  }
  return "?";
}

// The matrix dims of a matmul node after numpy's 1-D promotion.
struct MatmulDims {
  int64_t m = 1, k = 0, n = 1;
  Shape a_batch, b_batch, batch;  // batch = broadcast of a_batch and b_batch
  Shape out;
};

MatmulDims matmul_dims(const graph::Node& node, const MatmulAttrs& at, const Shape& a,
                       const Shape& b) {
  SAMPAN_CHECK(!a.empty() && !b.empty(), ErrorCode::kInvalidArgument,
               "node '{}' (matmul): inputs of shape {} and {}, expected rank >= 1", node.name,
               shape_str(a), shape_str(b));
  SAMPAN_CHECK(!at.trans_b || b.size() == 2, ErrorCode::kInvalidArgument,
               "node '{}' (matmul): trans_b needs a 2-D b, got {}", node.name, shape_str(b));
  MatmulDims d;
  d.k = a.back();
  if (a.size() >= 2) {
    d.m = a[a.size() - 2];
    d.a_batch.assign(a.begin(), a.end() - 2);
  }
  int64_t kb = b[0];
  if (b.size() >= 2) {
    kb = at.trans_b ? b[1] : b[b.size() - 2];
    d.n = at.trans_b ? b[0] : b.back();
    d.b_batch.assign(b.begin(), b.end() - 2);
  }
  SAMPAN_CHECK(d.k == kb, ErrorCode::kInvalidArgument,
               "node '{}' (matmul): shapes {} and {}{} do not match (k = {} and {})", node.name,
               shape_str(a), shape_str(b), at.trans_b ? " (trans_b)" : "", d.k, kb);
  d.batch = broadcast_shapes(node, d.a_batch, d.b_batch);
  d.out = d.batch;
  if (a.size() >= 2) d.out.push_back(d.m);
  if (b.size() >= 2) d.out.push_back(d.n);
  return d;
}

std::vector<TensorDesc> infer(const graph::Node& node, const MatmulAttrs& at,
                              const std::vector<TensorDesc>& in) {
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_dtype(node, in[1], 1, at.bf16 ? DType::kBF16 : DType::kF32);
  SAMPAN_CHECK(!at.bf16 || (in[1].shape.size() == 2 && !at.trans_b), ErrorCode::kInvalidArgument,
               "node '{}' (matmul): precision bf16 needs a 2-D b [k, n] without trans_b, got {}",
               node.name, shape_str(in[1].shape));
  const MatmulDims d = matmul_dims(node, at, in[0].shape, in[1].shape);
  if (in.size() > 2 && in[2].present) {
    expect_dtype(node, in[2], 2, DType::kF32);
    SAMPAN_CHECK(in[2].shape == Shape{d.n}, ErrorCode::kInvalidArgument,
                 "node '{}' (matmul): input 2 (bias) has shape {}, expected [{}]", node.name,
                 shape_str(in[2].shape), d.n);
  }
  return {{d.out, DType::kF32}};
}

cpu::GemmWeights weights(const float* w, int64_t n, int64_t k, const float* bias) {
  cpu::GemmWeights g;
  g.dtype = DType::kF32;
  g.k = k;
  g.n_blocks = 1;
  g.data[0] = w;
  g.rows[0] = n;
  g.bias[0] = bias;
  return g;
}

// y [m, n] = act(scale · x·Wᵀ + bias), W [n, k]; the bias goes to the GEMM when scale is 1.
void gemm_act(int64_t m, const float* x, const float* w, int64_t n, int64_t k, float scale,
              const float* bias, Activation act, float* y, cpu::TaskRunner& runner) {
  if (k == 0) {  // numpy: an empty sum is 0
    std::fill(y, y + m * n, 0.0f);
    cpu::bias_activation(m, n, y, n, 1.0f, bias, act, runner);
    return;
  }
  const bool folded = scale == 1.0f;
  cpu::gemm(m, x, k, weights(w, n, k, folded ? bias : nullptr), cpu::GemmEpilogue::kStore, y, n,
            runner);
  if (!folded || act != Activation::kNone) {
    cpu::bias_activation(m, n, y, n, scale, folded ? nullptr : bias, act, runner);
  }
}

std::vector<float>& scratch() {
  thread_local std::vector<float> s;
  return s;
}

void run_batched(const KernelContext& ctx, const MatmulDims& d, const Tensor& a, const Tensor& b,
                 const float* bias, float* y) {
  const MatmulAttrs& at = ctx.attrs_as<MatmulAttrs>();
  const Shape sa = broadcast_strides(d.a_batch, contiguous_strides(d.a_batch), d.batch);
  const Shape sb = broadcast_strides(d.b_batch, contiguous_strides(d.b_batch), d.batch);
  const int64_t items = shape_numel(d.batch);
  const int64_t rank = static_cast<int64_t>(d.batch.size());
  const int64_t m = d.m, k = d.k, n = d.n;
  auto item = [&](int64_t t, cpu::TaskRunner& runner) {
    int64_t ia = 0, ib = 0;
    for (int64_t rem = t, i = rank - 1; i >= 0; --i) {
      const size_t u = static_cast<size_t>(i);
      const int64_t idx = rem % d.batch[u];
      rem /= d.batch[u];
      ia += idx * sa[u];
      ib += idx * sb[u];
    }
    std::vector<float>& w = scratch();
    w.resize(static_cast<size_t>(n * k));
    transpose_scaled(b.data<float>() + ib * k * n, k, n, n, at.alpha, w.data(), 0, n);
    gemm_act(m, a.data<float>() + ia * m * k, w.data(), n, k, 1.0f, bias, at.activation,
             y + t * m * n, runner);
  };
  if (items >= ctx.runner.concurrency() && ctx.runner.concurrency() > 1) {
    cpu::util::parallel_for(ctx.runner, items, 1, [&](int64_t t0, int64_t t1) {
      cpu::SerialRunner serial;
      for (int64_t t = t0; t < t1; ++t) item(t, serial);
    });
  } else {
    for (int64_t t = 0; t < items; ++t) item(t, ctx.runner);
  }
}

void run_cpu(const KernelContext& ctx) {
  const MatmulAttrs& at = ctx.attrs_as<MatmulAttrs>();
  const Tensor a = ctx.inputs[0].is_contiguous() ? ctx.inputs[0] : ctx.inputs[0].contiguous();
  const Tensor b = ctx.inputs[1].is_contiguous() ? ctx.inputs[1] : ctx.inputs[1].contiguous();
  const float* bias = nullptr;
  if (ctx.inputs.size() > 2 && ctx.inputs[2].defined()) {
    const Tensor& t = ctx.inputs[2];
    SAMPAN_CHECK(t.is_contiguous(), ErrorCode::kInternal, "node '{}': bias not contiguous",
                 ctx.node.name);
    bias = t.data<float>();
  }
  const Tensor& y = ctx.outputs[0];
  SAMPAN_CHECK(y.is_contiguous(), ErrorCode::kInternal, "node '{}': output not contiguous",
               ctx.node.name);
  if (y.numel() == 0) return;
  const MatmulDims d = matmul_dims(ctx.node, at, a.shape(), b.shape());
  if (b.rank() >= 3) {
    run_batched(ctx, d, a, b, bias, y.data<float>());
    return;
  }
  // Every row of a (batch dims included) against one weight matrix.
  const int64_t rows = y.numel() / d.n;  // y is [rows, n] (n > 0: y is not empty)
  if (at.bf16) {  // the 1x1-conv form below, on bf16-rounded inputs
    // Bias and activation in the GEMM's tasks, on each block as it is finished (the same
    // values as bias_activation after it; BERT-base bf16, batch 8: that pass was 7.5 % of a run).
    cpu::matmul_bf16(rows, d.k, d.n, a.data<float>(), b.data<uint16_t>(), y.data<float>(),
                     ctx.runner, {at.alpha, bias, at.activation});
    return;
  }
  if (!at.trans_b && b.rank() == 2 && d.k > 0) {
    // y [rows, n] = a [rows, k] · b [k, n] is a 1x1 convolution of the "image" b (k channels of
    // one row of n pixels) by the "filter" a (rows output channels): the conv GEMM packs tiles
    // of b and reads a in place, and measured ~2x the linear GEMM's speed on BERT-base's
    // products (which the linear GEMM could only run on a transposed copy of b).
    cpu::ConvShape s;
    s.c = d.k;
    s.w = d.n;
    s.o = rows;
    cpu::conv2d(s, b.data<float>(), a.data<float>(), nullptr, nullptr, {}, y.data<float>(), ctx.runner);
    cpu::bias_activation(rows, d.n, y.data<float>(), d.n, at.alpha, bias, at.activation, ctx.runner);
    return;
  }
  // b is W already ([n, k] with trans_b, or 1-D), or k == 0 (gemm_act writes the empty sum).
  gemm_act(rows, a.data<float>(), b.data<float>(), d.n, d.k, at.alpha, bias, at.activation,
           y.data<float>(), ctx.runner);
}

}  // namespace

MatmulAttrs parse_matmul_attrs(const graph::Node& node) {
  MatmulAttrs a;
  a.trans_b = node.attrs.get_int("trans_b", 0) != 0;
  a.alpha = static_cast<float>(node.attrs.get_float("alpha", 1.0));
  const std::string act = node.attrs.get_string("activation", "none");
  bool found = false;
  for (Activation c : {Activation::kNone, Activation::kRelu, Activation::kGelu,
                       Activation::kGeluTanh}) {
    if (act == activation_name(c)) {
      a.activation = c;
      found = true;
    }
  }
  SAMPAN_CHECK(found, ErrorCode::kInvalidArgument,
               "node '{}' (matmul): unknown activation '{}' (none, relu, gelu, gelu_tanh)",
               node.name, act);
  const std::string precision = node.attrs.get_string("precision", "f32");
  SAMPAN_CHECK(precision == "f32" || precision == "bf16", ErrorCode::kInvalidArgument,
               "node '{}' (matmul): unknown precision '{}' (f32, bf16)", node.name, precision);
  a.bf16 = precision == "bf16";
  return a;
}

namespace {
const RegisterOp kSchema(with_attrs<MatmulAttrs>({.name = "matmul", .min_inputs = 2,
                                                  .max_inputs = 3},
                                                 {{"trans_b", AttrType::kInt, false},
                                                  {"alpha", AttrType::kFloat, false},
                                                  {"activation", AttrType::kString, false},
                                                  {"precision", AttrType::kString, false}},
                                                 parse_matmul_attrs, infer));
const RegisterKernel kCpu("matmul", DeviceType::kCPU, run_cpu);
}  // namespace

}  // namespace sampan::ops
