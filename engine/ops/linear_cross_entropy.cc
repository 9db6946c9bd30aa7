// linear_cross_entropy(x [N, k] f32, weight, bias, scales, zeros, targets [N] i32)
//     -> loss [1] f32, dx [N, k] f32 (or [0, k]), scratch [R, V] f32
// cross_entropy(linear(x, weight, bias, scales, zeros), targets) with the logits [N, V] never
// held whole: rows go R at a time through the GEMM into `scratch`, their losses are summed, and
// (attribute with_grad = 1) their gradient d(loss)/d(logits) (softmax - onehot) replaces them
// in place and is multiplied back through the weights into dx = d(loss)/dx, so the backward needs
// no logits either (train/grad_linear.cc scales dx by the upstream gradient). Training's LM head
// (train/train_graph.cc): at 2048 tokens and a 32000 vocabulary the unfused graph held 2 x 262 MB
// of logits and their gradient per sequence, 2 x 1 GB at Llama 3's 128256.
//
// Inputs 0 .. 4 are linear's slots for one weight block (engine/ops/linear.cc: every weight
// format, absent slots kNoValue), input 5 the targets. Attributes: linear's (group_size,
// ggml_type, bf16_operands, round_x_bf16; n_blocks must be 1, epilogue store), cross_entropy's
// ignore_index (default -100), with_grad (0/1, default 0), round_dy_bf16 (0/1: the logits'
// gradient rounded to bf16 before it meets the weights, as a round_grad_bf16 after the linear
// does in bf16 training), chunk_rows (R; default: as many rows as fit 64 MiB of logits, at
// least 16). A target outside [0, V) that is not ignore_index is an error naming the node and
// the row, as cross_entropy's.
// Per row the same operations as linear, cross_entropy and, for dx, cross_entropy_grad (with the
// forward's row logsumexps and dloss 1) then linear_grad_input; the GEMMs see R rows at a time
// instead of N, which may order a product's f32 sums differently. The loss sums the rows in
// order in double per chunk, then the chunks.
#include <algorithm>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/cross_entropy.h"
#include "engine/ops/linear.h"
#include "kernels/cpu/cross_entropy_cpu.h"
#include "kernels/cpu/linear_grad_cpu.h"

namespace sampan::ops {
namespace {

constexpr int64_t kSlots = 5;          // x, weight, bias, scales, zeros
constexpr size_t kTargets = 5;         // the input after them
constexpr int64_t kScratchBytes = int64_t{64} << 20;

struct LinearCrossEntropyAttrs final : OpAttrs {
  LinearAttrs linear;
  int32_t ignore_index = -100;
  bool with_grad = false;
  bool round_dy = false;
  int64_t chunk_rows = 0;  // 0: from kScratchBytes
};

LinearCrossEntropyAttrs parse(const graph::Node& node) {
  LinearCrossEntropyAttrs a;  // the schema holds the node to 6 inputs
  a.linear = parse_linear_attrs(node, kSlots);
  SAMPAN_CHECK(a.linear.n_blocks == 1 && a.linear.epilogue == GemmEpilogue::kStore,
               ErrorCode::kInvalidArgument,
               "node '{}' (linear_cross_entropy): one weight block and the store epilogue only",
               node.name);
  a.ignore_index = parse_cross_entropy_attrs(node).ignore_index;
  a.with_grad = flag_attr(node, "with_grad");
  a.round_dy = flag_attr(node, "round_dy_bf16");
  a.chunk_rows = node.attrs.get_int("chunk_rows", 0);
  SAMPAN_CHECK(a.chunk_rows >= 0, ErrorCode::kInvalidArgument,
               "node '{}' (linear_cross_entropy): chunk_rows = {} is negative", node.name,
               a.chunk_rows);
  return a;
}

int64_t chunk_rows(const LinearCrossEntropyAttrs& a, int64_t n, int64_t vocab) {
  const int64_t fit = std::max<int64_t>(16, kScratchBytes / (4 * std::max<int64_t>(vocab, 1)));
  return std::max<int64_t>(1, std::min(n, a.chunk_rows > 0 ? a.chunk_rows : fit));
}

std::vector<TensorDesc> infer(const graph::Node& node, const LinearCrossEntropyAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const std::vector<TensorDesc> slots(in.begin(), in.begin() + kSlots);
  const TensorDesc logits = infer_linear(node, a.linear, slots)[0];
  const int targets = static_cast<int>(kTargets);
  SAMPAN_CHECK(in[kTargets].present, ErrorCode::kInvalidArgument,
               "node '{}' (linear_cross_entropy): input 5 (targets) is missing", node.name);
  expect_rank(node, in[kTargets], targets, 1);
  expect_dtype(node, in[kTargets], targets, DType::kI32);
  expect_dim(node, in[kTargets], targets, 0, in[0].shape[0]);
  const int64_t n = in[0].shape[0], k = in[0].shape[1], vocab = logits.shape[1];
  return {{{1}, DType::kF32},
          {{a.with_grad ? n : 0, k}, DType::kF32},
          {{chunk_rows(a, n, vocab), vocab}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const auto& a = ctx.attrs_as<LinearCrossEntropyAttrs>();
  const Tensor& x = ctx.inputs[0];
  const Tensor& targets = ctx.inputs[kTargets];
  const Tensor& scratch = ctx.outputs[2];
  const int64_t n = x.dim(0), vocab = scratch.dim(1), rows_per = scratch.dim(0);
  check_targets(ctx, targets, vocab, a.ignore_index);
  const int32_t* t = targets.data<int32_t>();
  const GemmWeights w = linear_weights(ctx, a.linear);
  float* logits = scratch.data<float>();
  std::vector<float> lse(static_cast<size_t>(2 * rows_per));
  double loss = 0;
  for (int64_t r0 = 0; r0 < n; r0 += rows_per) {
    const int64_t rows = std::min(rows_per, n - r0);
    linear_rows_cpu(ctx, a.linear, w, r0, rows, logits, vocab);
    loss += cpu::cross_entropy_forward<float>(rows, vocab, logits, vocab, t + r0, a.ignore_index,
                                              ctx.runner, lse.data());
    if (!a.with_grad) continue;
    cpu::cross_entropy_backward<float>(rows, vocab, logits, vocab, t + r0, a.ignore_index, 1.0,
                                       logits, vocab, ctx.runner, lse.data());
    const Tensor& dx = ctx.outputs[1];
    cpu::linear_grad_input(rows, logits, vocab, w, dx.data<float>() + r0 * row_stride(dx),
                           row_stride(dx), ctx.runner, a.round_dy);
  }
  ctx.outputs[0].data<float>()[0] = static_cast<float>(loss);
}

const RegisterOp kSchema(with_attrs<LinearCrossEntropyAttrs>(
    {.name = "linear_cross_entropy", .min_inputs = 6, .max_inputs = 6, .n_outputs = 3},
    {{"n_blocks", AttrType::kInt, false},
     {"epilogue", AttrType::kString, false},
     {"group_size", AttrType::kInt, false},
     {"ggml_type", AttrType::kInt, false},
     {"bf16_operands", AttrType::kInt, false},
     {"round_x_bf16", AttrType::kInt, false},
     {"ignore_index", AttrType::kInt, false},
     {"with_grad", AttrType::kInt, false},
     {"round_dy_bf16", AttrType::kInt, false},
     {"chunk_rows", AttrType::kInt, false}},
    parse, infer));
const RegisterKernel kCpu("linear_cross_entropy", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
