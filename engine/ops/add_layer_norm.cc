// add_layer_norm(a f32, b f32 (numpy-broadcast with a), scale [N] (opt), bias [N] (opt))
// -> layer_norm(a + b) over the last axis (N = the sum's last dim); attribute eps (default 1e-5).
// Made by the fuse_add_layer_norm pass (engine/graph/passes/encoder_passes.h) from binary add +
// layer_norm(axis -1): each block of rows is summed into the output and normalised there while
// it is still in cache, instead of writing the sum and reading it back. The arithmetic is that
// of binary add (f32 a + b) then cpu::layer_norm, so results equal the unfused graph's.
#include <algorithm>

#include "engine/core/error.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/layer_norm_cpu.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::ops {
namespace {

struct AddLayerNormAttrs final : OpAttrs {
  float eps = 1e-5f;
};

AddLayerNormAttrs parse(const graph::Node& node) {
  AddLayerNormAttrs a;
  a.eps = static_cast<float>(node.attrs.get_float("eps", 1e-5));
  SAMPAN_CHECK(a.eps >= 0.0f, ErrorCode::kInvalidArgument,
               "node '{}' (add_layer_norm): eps {} < 0", node.name, a.eps);
  return a;
}

bool present(const std::vector<TensorDesc>& in, size_t i) { return i < in.size() && in[i].present; }

std::vector<TensorDesc> infer(const graph::Node& node, const AddLayerNormAttrs&,
                              const std::vector<TensorDesc>& in) {
  expect_dtype(node, in[0], 0, DType::kF32);
  expect_dtype(node, in[1], 1, DType::kF32);
  const Shape out = broadcast_shapes(node, in[0].shape, in[1].shape);
  SAMPAN_CHECK(!out.empty(), ErrorCode::kInvalidArgument,
               "node '{}' (add_layer_norm): the sum is a scalar, expected rank >= 1", node.name);
  for (size_t i = 2; i < 4; ++i) {
    if (!present(in, i)) continue;
    expect_dtype(node, in[i], static_cast<int>(i), DType::kF32);
    SAMPAN_CHECK(in[i].shape == Shape{out.back()}, ErrorCode::kInvalidArgument,
                 "node '{}' (add_layer_norm): input {} ({}) has shape {}, expected [{}]",
                 node.name, i, i == 2 ? "scale" : "bias", shape_str(in[i].shape), out.back());
  }
  return {{out, DType::kF32}};
}

const float* optional_data(const KernelContext& ctx, size_t i) {
  if (i >= ctx.inputs.size() || !ctx.inputs[i].defined()) return nullptr;
  SAMPAN_CHECK(ctx.inputs[i].is_contiguous(), ErrorCode::kInternal,
               "node '{}': input {} not contiguous", ctx.node.name, i);
  return ctx.inputs[i].data<float>();
}

void run_cpu(const KernelContext& ctx) {
  const AddLayerNormAttrs& at = ctx.attrs_as<AddLayerNormAttrs>();
  const Tensor a = ctx.inputs[0].is_contiguous() ? ctx.inputs[0] : ctx.inputs[0].contiguous();
  const Tensor b = ctx.inputs[1].is_contiguous() ? ctx.inputs[1] : ctx.inputs[1].contiguous();
  const Tensor& y = ctx.outputs[0];
  SAMPAN_CHECK(y.is_contiguous(), ErrorCode::kInternal, "node '{}': output not contiguous",
               ctx.node.name);
  if (y.numel() == 0) return;
  const Shape& out = y.shape();
  const int64_t n = out.back(), rows = y.numel() / n;
  const Shape sa = broadcast_strides(a.shape(), contiguous_strides(a.shape()), out);
  const Shape sb = broadcast_strides(b.shape(), contiguous_strides(b.shape()), out);
  const int64_t la = sa.back(), lb = sb.back();  // 1, or 0 for a stretched last dim
  const bool same = a.shape() == out && b.shape() == out;
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* scale = optional_data(ctx, 2);
  const float* bias = optional_data(ctx, 3);
  float* py = y.data<float>();
  const int rank = static_cast<int>(out.size());
  // Blocks of rows small enough that the sum is still in L1/L2 when it is normalised.
  const int64_t block = std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1));
  cpu::util::parallel_for(ctx.runner, rows, block, [&](int64_t r0, int64_t r1) {
    cpu::SerialRunner serial;
    for (int64_t c0 = r0; c0 < r1; c0 += block) {
      const int64_t c1 = std::min(r1, c0 + block);
      for (int64_t r = c0; r < c1; ++r) {
        float* yr = py + r * n;
        if (same) {
          const float* ar = pa + r * n;
          const float* br = pb + r * n;
          for (int64_t j = 0; j < n; ++j) yr[j] = ar[j] + br[j];
          continue;
        }
        int64_t oa = 0, ob = 0;
        for (int64_t rem = r, d = rank - 2; d >= 0; --d) {
          const size_t u = static_cast<size_t>(d);
          const int64_t idx = rem % out[u];
          rem /= out[u];
          oa += idx * sa[u];
          ob += idx * sb[u];
        }
        for (int64_t j = 0; j < n; ++j) yr[j] = pa[oa + j * la] + pb[ob + j * lb];
      }
      cpu::layer_norm(c1 - c0, n, py + c0 * n, n, scale, bias, at.eps, py + c0 * n, n, serial);
    }
  });
}

const RegisterOp kSchema(with_attrs<AddLayerNormAttrs>(
    {.name = "add_layer_norm", .min_inputs = 2, .max_inputs = 4},
    {{"eps", AttrType::kFloat, false}}, parse, infer));
const RegisterKernel kCpu("add_layer_norm", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
