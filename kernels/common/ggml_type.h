// The block-quantized weight types of GGUF files (llama.cpp's ggml types), as every backend's
// kernels and the GGUF loader name them. The numeric values are the type ids GGUF files store.
//
// A tensor of a block type is stored row by row; each row of k elements (k a multiple of the
// type's block size) is k / block_size blocks of type_size bytes, laid out as llama.cpp's
// ggml-common.h defines them (public format; see kernels/cpu/ggml_dequant.h for the formula of
// each type). Plain types (F32, F16, BF16) are loaded as ordinary tensors and never reach the
// block kernels.
#pragma once

#include <cstdint>

#include "kernels/common/host_device.h"

namespace sampan {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Elements per block and bytes per block; 0 for an id Sampan does not know.
SAMPAN_HD constexpr int64_t ggml_block_size(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16: return 1;
    case GgmlType::kI8: case GgmlType::kI16: case GgmlType::kI32: case GgmlType::kI64:
    case GgmlType::kF64: return 1;
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ8_0: case GgmlType::kQ8_1: case GgmlType::kIQ4_NL: case GgmlType::kMXFP4:
      return 32;
    case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: case GgmlType::kQ8_K: case GgmlType::kIQ2_XXS: case GgmlType::kIQ2_XS:
    case GgmlType::kIQ3_XXS: case GgmlType::kIQ1_S: case GgmlType::kIQ3_S: case GgmlType::kIQ2_S:
    case GgmlType::kIQ4_XS: case GgmlType::kIQ1_M: case GgmlType::kTQ1_0: case GgmlType::kTQ2_0:
      return 256;
  }
  return 0;
}

SAMPAN_HD constexpr int64_t ggml_type_size(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 4;
    case GgmlType::kF16: return 2;
    case GgmlType::kBF16: return 2;
    case GgmlType::kI8: return 1;
    case GgmlType::kI16: return 2;
    case GgmlType::kI32: return 4;
    case GgmlType::kI64: return 8;
    case GgmlType::kF64: return 8;
    case GgmlType::kQ4_0: return 18;    // f16 d, 16 bytes of nibbles
    case GgmlType::kQ4_1: return 20;    // f16 d, f16 m, 16 bytes
    case GgmlType::kQ5_0: return 22;    // f16 d, 4 bytes qh, 16 bytes
    case GgmlType::kQ5_1: return 24;    // f16 d, f16 m, 4 bytes qh, 16 bytes
    case GgmlType::kQ8_0: return 34;    // f16 d, 32 int8
    case GgmlType::kQ8_1: return 36;    // f16 d, f16 s, 32 int8
    case GgmlType::kQ2_K: return 84;    // 16 scales, 64 qs, f16 d, f16 dmin
    case GgmlType::kQ3_K: return 110;   // 32 hmask, 64 qs, 12 scales, f16 d
    case GgmlType::kQ4_K: return 144;   // f16 d, f16 dmin, 12 scales, 128 qs
    case GgmlType::kQ5_K: return 176;   // f16 d, f16 dmin, 12 scales, 32 qh, 128 qs
    case GgmlType::kQ6_K: return 210;   // 128 ql, 64 qh, 16 int8 scales, f16 d
    case GgmlType::kQ8_K: return 292;   // f32 d, 256 int8, 16 int16 bsums
    case GgmlType::kIQ4_NL: return 18;  // f16 d, 16 bytes of nibbles (non-linear codebook)
    case GgmlType::kIQ4_XS: return 136; // f16 d, u16 scales_h, 4 scales_l, 128 qs
    case GgmlType::kIQ2_XXS: return 66;
    case GgmlType::kIQ2_XS: return 74;
    case GgmlType::kIQ3_XXS: return 98;
    case GgmlType::kIQ1_S: return 50;
    case GgmlType::kIQ3_S: return 110;
    case GgmlType::kIQ2_S: return 82;
    case GgmlType::kIQ1_M: return 56;
    case GgmlType::kTQ1_0: return 54;
    case GgmlType::kTQ2_0: return 66;
    case GgmlType::kMXFP4: return 17;
  }
  return 0;
}

// The block types Sampan's kernels run (the weights of a linear or an embedding table).
SAMPAN_HD constexpr bool ggml_block_type_supported(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ8_0: case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: case GgmlType::kQ6_K: case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS:
    case GgmlType::kMXFP4: case GgmlType::kTQ1_0: case GgmlType::kTQ2_0:
      return true;
    default: return false;
  }
}

// Bytes of one row of k elements; -1 when k is not a whole number of blocks, the type unknown,
// or the count does not fit int64 (a file's dimensions are not to be trusted).
SAMPAN_HD constexpr int64_t ggml_row_bytes(GgmlType t, int64_t k) {
  const int64_t b = ggml_block_size(t);
  if (b == 0 || k < 0 || k % b != 0) return -1;
  const int64_t size = ggml_type_size(t);
  if (size <= 0 || k / b > INT64_MAX / size) return -1;
  return k / b * size;
}

// "Q4_K", "F16", ...; "type <id>" style names are the caller's job: nullptr for an unknown id.
const char* ggml_type_name(GgmlType t);

}  // namespace sampan
