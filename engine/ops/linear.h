// The linear op's parsed attributes (the op itself: linear.cc; its CUDA kernel: linear_cuda.cc).
// Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include <cstdint>

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

}  // namespace sampan::ops
