// The parsed attributes and shared shape checks of causal_attention and causal_attention_grad
// (causal_attention.cc, causal_attention_grad.cc): the training form of self-attention.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/ops/op_registry.h"
#include "kernels/cpu/causal_attention_cpu.h"

namespace sampan::ops {

struct CausalAttentionAttrs final : OpAttrs {
  int64_t n_heads = 0;  // a positive multiple of n_kv_heads
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  double scale = 1.0;
  int64_t sliding_window = 0;  // 0: none
  bool bf16_products = false;  // attr bf16_products 0/1 (CausalAttentionDims says what)
};

inline std::vector<AttrDecl> kCausalAttentionAttrDecls() {
  return {{"n_heads", AttrType::kInt},
          {"n_kv_heads", AttrType::kInt},
          {"head_dim", AttrType::kInt},
          {"scale", AttrType::kFloat},
          {"sliding_window", AttrType::kInt, false},
          {"bf16_products", AttrType::kInt, false}};
}

CausalAttentionAttrs parse_causal_attention_attrs(const graph::Node& node);
// Checks inputs 0..3 (q, k, v, lengths); returns the batch B.
int64_t check_causal_attention_inputs(const graph::Node& node, const CausalAttentionAttrs& a,
                                      const std::vector<TensorDesc>& in);
// The kernel's dims for a launch; checks every length against T (one line naming the node).
cpu::CausalAttentionDims causal_attention_dims(const KernelContext& ctx);

}  // namespace sampan::ops
