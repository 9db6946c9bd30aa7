// The embedding op's parsed attributes (the op itself: embedding.cc; its CUDA kernel:
// embedding_cuda.cc). Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include "engine/ops/op_registry.h"
#include "kernels/common/ggml_type.h"

namespace sampan::ops {

struct EmbeddingAttrs final : OpAttrs {
  GgmlType ggml_type = GgmlType::kF32;  // u8 tables only: the GGUF block type of the rows
};

}  // namespace sampan::ops
