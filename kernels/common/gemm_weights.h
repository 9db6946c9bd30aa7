// The weights of one linear layer as the GEMM kernels of every backend take them: one definition
// for kernels/cpu (host pointers) and kernels/cuda (device pointers), filled by the engine's
// `linear` op from its weight tensors.
//
// W is the virtual concatenation of up to kMaxGemmBlocks row blocks that live in separate memory
// (for example q_proj, k_proj and v_proj straight from the mapped model file): fusing Q/K/V or
// gate/up into one GEMM never copies a weight. Row-major everywhere.
//
// Weight formats. Plain: kF32, kF16, kBF16. Quantized (weight-only; x and y stay f32):
//  - kF8E4M3: block i data [rows[i], k] bytes (OCP E4M3), scales[i] [rows[i]] f32 (one per
//    output channel): w[r][c] = fp8_to_f32(data[r][c]) * scale[r].
//  - kI4: block i data [rows[i], k / 2] bytes, two signed 4-bit values q in [-8, 7] per byte,
//    element 2j in the low nibble; k % group_size == 0, group_size in {32, 64, 128}
//    (int4_group_size_ok, quant_scheme.h); scales[i] [rows[i], k / group_size] of scale_dtype
//    (kF16 or kBF16); zeros[i] [rows[i], k / group_size] int8 or null (symmetric: zero 0):
//    w[r][c] = (q[r][c] - zero[r][c / g]) * scale[r][c / g].
//  - GGUF block types (dtype kU8, ggml_type a block type): block i data [rows[i], row_bytes] bytes,
//    each row k / block_size blocks of llama.cpp's layout (ggml_type.h, kernels/cpu/ggml_dequant.h);
//    no scales or zeros (they live inside the blocks).
// Every block of one call has the same format (and group_size / scale_dtype / ggml_type).
#pragma once

#include <cstdint>

#include "kernels/common/dtype.h"
#include "kernels/common/ggml_type.h"
#include "kernels/common/host_device.h"

namespace sampan {

constexpr int kMaxGemmBlocks = 3;

struct GemmWeights {
  DType dtype = DType::kF32;  // kF32, kF16, kBF16, kF8E4M3, kI4 or kU8 (ggml blocks)
  int64_t k = 0;              // reduction length: columns of every block
  int n_blocks = 0;
  const void* data[kMaxGemmBlocks] = {};    // block i: [rows[i], k] elements, row-major, contiguous
  int64_t rows[kMaxGemmBlocks] = {};
  const float* bias[kMaxGemmBlocks] = {};   // block i: [rows[i]] or null
  // Quantized formats only (see above); ignored for plain weights.
  const void* scales[kMaxGemmBlocks] = {};  // kF8E4M3: [rows[i]] f32; kI4: [rows[i], k / g]
  const int8_t* zeros[kMaxGemmBlocks] = {}; // kI4: [rows[i], k / g] or null (symmetric)
  DType scale_dtype = DType::kF16;          // kI4: kF16 or kBF16
  int64_t group_size = 0;                   // kI4: 32, 64 or 128
  // dtype kU8 only: the GGUF block type of every block (ggml_block_type_supported); k is a
  // multiple of its block size.
  GgmlType ggml_type = GgmlType::kF32;

  SAMPAN_HD int64_t n() const {
    int64_t s = 0;
    for (int i = 0; i < n_blocks; ++i) s += rows[i];
    return s;
  }
};

enum class GemmEpilogue {
  // y[m, 0:n()] = x·Wᵀ + bias
  kStore,
  // Needs n_blocks == 2 and rows[0] == rows[1] == F (gate, up). y[m, 0:F] =
  // silu(x·W0ᵀ + b0) * (x·W1ᵀ + b1); the [m, 2F] intermediate is never written.
  kSiluMul,
};

}  // namespace sampan
