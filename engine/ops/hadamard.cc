// hadamard(x [rows, n] f32) -> [rows, n] f32: the normalised block-diagonal Walsh-Hadamard of
// each row (kernels/cpu/hadamard_cpu.h); attribute block (int, a power of two dividing n). x may
// be a column slice (row stride > n). Online half of the rotations in models/llama_rotate.h.
#include "engine/ops/hadamard.h"

#include <cstring>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/hadamard_cpu.h"

namespace sampan::ops {
namespace {

HadamardAttrs parse(const graph::Node& node) {
  HadamardAttrs a;
  a.block = node.attrs.get_int("block");
  SAMPAN_CHECK(a.block >= 1 && (a.block & (a.block - 1)) == 0, ErrorCode::kInvalidArgument,
               "node '{}' (hadamard): block {} is not a power of two", node.name, a.block);
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const HadamardAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  expect_dtype(node, in[0], 0, DType::kF32);
  const int64_t block = a.block;
  const int64_t n = in[0].shape[1];
  // A width of 0 has no block to check (an empty batch still plans).
  SAMPAN_CHECK(n % block == 0, ErrorCode::kInvalidArgument,
               "node '{}' (hadamard): block {} does not divide the row width {}", node.name, block,
               n);
  return {{in[0].shape, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  const int64_t rows = x.dim(0), n = x.dim(1);
  if (rows == 0 || n == 0) return;
  const int64_t ldx = row_stride(x), ldy = row_stride(y);
  const float* src = x.data<float>();
  float* dst = y.data<float>();
  // The kernel works in place; the copy is one cheap pass next to its log2(block) stages.
  if (src != dst || ldx != ldy) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * ldy, src + r * ldx, static_cast<size_t>(n) * sizeof(float));
    }
  }
  cpu::hadamard_rows(rows, n, ctx.attrs_as<HadamardAttrs>().block, dst, ldy, ctx.runner);
}

const RegisterOp kSchema(with_attrs<HadamardAttrs>({.name = "hadamard", .min_inputs = 1,
                                                    .max_inputs = 1},
                                                   {{"block", AttrType::kInt}}, parse, infer));
const RegisterKernel kCpu("hadamard", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
