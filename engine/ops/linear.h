// The linear op's parsed attributes (the op itself: linear.cc; its CUDA kernel: linear_cuda.cc).
// Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/ops/op_registry.h"
#include "kernels/common/gemm_weights.h"

namespace sampan::ops {

struct LinearAttrs final : OpAttrs {
  int n_blocks = 1;  // 1..kMaxGemmBlocks, and the node's input count fits it
  GemmEpilogue epilogue = GemmEpilogue::kStore;
  int64_t group_size = 0;  // int4 weights only (checked against the weights by inference)
  // u8 weights only: the GGUF block type of every block (attribute "ggml_type", its GGUF id).
  GgmlType ggml_type = GgmlType::kF32;
  // Attribute "bf16_operands" (0/1): x and the weights hold only bf16 values (a round_bf16 or a
  // bf16 tensor feeds each), so a GEMM that rounds both to bf16 rounds nothing. The CPU kernel
  // then multiplies under GemmPrecision::kBf16 (vdpbf16ps panels or a single bf16 x on AMX:
  // the same exact products, f32 sums in another order) unless the caller asked for kF32.
  // bf16 LoRA training sets it (engine/train/train_graph.cc).
  bool bf16_operands = false;
  // Attribute "round_x_bf16" (0/1): the product of x rounded to bf16 (nearest even), bit for bit
  // a round_bf16 node before it. bf16 training folds such nodes in (train/train_graph.cc): with
  // bf16 weights on AMX the tiles' packing rounds x anyway; elsewhere a rounded copy is made.
  bool round_x = false;
};

// What linear_cross_entropy (linear_cross_entropy.cc) shares with linear: its inputs 0 .. 4 are
// linear's slots for one weight block (x, weight, bias, scales, zeros; absent ones undefined).
// parse_linear_attrs: linear's attributes of `node`, whose first n_slots inputs are the slots.
LinearAttrs parse_linear_attrs(const graph::Node& node, int64_t n_slots);
// linear's checks and output [rows, n] over in[0 .. n_slots).
std::vector<TensorDesc> infer_linear(const graph::Node& node, const LinearAttrs& a,
                                     const std::vector<TensorDesc>& in);
// The weight slots of ctx's inputs as the GEMM's view.
GemmWeights linear_weights(const KernelContext& ctx, const LinearAttrs& a);
// y[rows, n] (row stride ldy) = x[row0 .. row0 + rows) · Wᵀ + bias, x = ctx.inputs[0], with
// linear's precision and rounding (bf16_operands, round_x_bf16): what the linear op computes
// for those rows.
void linear_rows_cpu(const KernelContext& ctx, const LinearAttrs& a, const GemmWeights& w,
                     int64_t row0, int64_t rows, float* y, int64_t ldy);

}  // namespace sampan::ops
