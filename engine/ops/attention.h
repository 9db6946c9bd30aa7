// The attention op's parsed attributes (the op itself: attention.cc; its CUDA kernel:
// attention_cuda.cc). Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include "engine/ops/op_registry.h"
#include "kernels/cpu/attention_cpu.h"

namespace sampan::ops {

struct AttentionAttrs final : OpAttrs {
  // n_heads, n_kv_heads (n_heads a positive multiple of it), head_dim, scale, sliding_window
  // (0 = none, never negative).
  cpu::AttentionShape shape;
  cpu::KvDtype kv_dtype = cpu::KvDtype::kF32;  // the KV caches' storage format
};

}  // namespace sampan::ops
