// lora(y [T, out] f32, x [T, in] f32, ids [T] i32, a [n, r, in] f32, b [n, out, r] f32,
//      scale [n] f32) -> y_out [T, out] f32
//
// Adds the delta of a LoRA adapter to a projection's output, per token: y_out[t] = y[t] +
// scale[k] · (x[t] · a[k]ᵀ) · b[k]ᵀ with k = ids[t], and y_out[t] = y[t] for ids[t] == -1. So one
// graph serves the base model and n adapters in one batch (models/lora_adapter.h); ranks are
// zero-padded to r, and an adapter that does not target this projection has scale 0. y may be a
// column slice of a fused linear's output (fuse_sibling_linears splits it without copying).
// An id outside [-1, n) is Error(kInvalidArgument) naming the node (the CPU kernel also names
// the token; the CUDA kernel, engine/ops/lora_cuda.cc, reports it after the run).
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/lora_cpu.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  const char* names[] = {"y", "x", "ids", "a", "b", "scale"};
  const int ranks[] = {2, 2, 1, 3, 3, 1};
  const DType types[] = {DType::kF32, DType::kF32, DType::kI32,
                         DType::kF32, DType::kF32, DType::kF32};
  for (int i = 0; i < 6; ++i) {
    SAMPAN_CHECK(in[static_cast<size_t>(i)].present, ErrorCode::kInvalidArgument,
                 "node '{}' (lora): input {} ({}) is missing", node.name, i, names[i]);
    expect_rank(node, in[static_cast<size_t>(i)], i, ranks[i]);
    expect_dtype(node, in[static_cast<size_t>(i)], i, types[i]);
  }
  const int64_t t = in[0].shape[0], out = in[0].shape[1], k = in[1].shape[1];
  const int64_t n = in[3].shape[0], r = in[3].shape[1];
  expect_dim(node, in[1], 1, 0, t);
  expect_dim(node, in[2], 2, 0, t);
  expect_dim(node, in[3], 3, 2, k);
  expect_dim(node, in[4], 4, 0, n);
  expect_dim(node, in[4], 4, 1, out);
  expect_dim(node, in[4], 4, 2, r);
  expect_dim(node, in[5], 5, 0, n);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& y = ctx.inputs[0];
  const Tensor& x = ctx.inputs[1];
  const Tensor& ids = ctx.inputs[2];
  const Tensor& a = ctx.inputs[3];
  const Tensor& b = ctx.inputs[4];
  const Tensor& scale = ctx.inputs[5];
  const Tensor& out = ctx.outputs[0];
  const int64_t n = a.dim(0);
  SAMPAN_CHECK(ids.is_contiguous() && a.is_contiguous() && b.is_contiguous() &&
                   scale.is_contiguous(),
               ErrorCode::kInternal, "node '{}' (lora): ids, a, b and scale must be contiguous",
               ctx.node.name);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < ids.dim(0); ++t) {
    SAMPAN_CHECK(id[t] >= -1 && id[t] < n, ErrorCode::kInvalidArgument,
                 "node '{}' (lora): token {} asks for adapter {}, but the graph has adapters "
                 "0..{} (-1: none)",
                 ctx.node.name, t, id[t], n - 1);
  }
  cpu::lora_apply(y.dim(0), x.dim(1), y.dim(1), n, a.dim(1), y.data<float>(), row_stride(y),
                  x.data<float>(), row_stride(x), id, a.data<float>(), b.data<float>(),
                  scale.data<float>(), out.data<float>(), row_stride(out), ctx.runner);
}

const RegisterOp kSchema({.name = "lora", .min_inputs = 6, .max_inputs = 6, .infer = infer});
const RegisterKernel kCpu("lora", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
