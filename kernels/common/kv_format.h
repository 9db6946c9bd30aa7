// The KV-cache formats: one definition for every backend (the CPU kernels, the CUDA kernels, the
// engine that sizes the pools, and the option parsers).
//
// Every token row of one cache (K or V) is self-contained: kv_row_bytes() bytes holding its
// n_kv_heads * head_dim values and whatever scales its format needs, so the pools keep the
// [n_blocks, block_size, row] layout for every format. A row is n_kv_heads head records of
// kv_head_bytes() each, back to back.
//  - kF32: the values as f32 (row = kv_dim f32; the pools are f32 tensors).
//  - kBF16: values as bf16 (round to nearest even), no scales.
//  - kF8E4M3: one f32 scale per (token, head) = absmax / 448, values E4M3 of value / scale.
//  - kI8: one f32 scale per (token, head) = absmax / 127, values int8 round(value / scale).
//  - kI4: asymmetric groups of kv_i4_group(head_dim) values per (token, head):
//    an f16 scale and an f16 minimum per group, values 4-bit unsigned u in [0, 15] (two per
//    byte, element 2j in the low nibble), value = min + u * scale.
// The byte layout inside a record is private to the kernels (kernels/cpu/kv_quant.h says what
// every byte means; the CUDA kernels write the CPU's bytes); callers only size pools with
// kv_row_bytes().
#pragma once

#include <cstdint>

#include "kernels/common/host_device.h"

namespace sampan {

enum class KvDtype : uint8_t { kF32, kBF16, kF8E4M3, kI8, kI4 };

constexpr int64_t kKvI4Group = 32;
// kKvI4Group when it divides head_dim, else head_dim (one group per head).
SAMPAN_HD constexpr int64_t kv_i4_group(int64_t head_dim) {
  return head_dim % kKvI4Group == 0 ? kKvI4Group : head_dim;
}

// Bytes of one head record of head_dim values.
SAMPAN_HD constexpr int64_t kv_head_bytes(KvDtype dtype, int64_t head_dim) {
  switch (dtype) {
    case KvDtype::kF32: return head_dim * 4;
    case KvDtype::kBF16: return head_dim * 2;
    case KvDtype::kF8E4M3:
    case KvDtype::kI8: return head_dim + 4;
    case KvDtype::kI4: return (head_dim + 1) / 2 + head_dim / kv_i4_group(head_dim) * 4;
  }
  return 0;
}

// Bytes of one token row of one cache (K or V) of n_kv_heads heads of head_dim values.
SAMPAN_HD constexpr int64_t kv_row_bytes(KvDtype dtype, int64_t n_kv_heads, int64_t head_dim) {
  return n_kv_heads * kv_head_bytes(dtype, head_dim);
}

// "f32" "bf16" "fp8" "int8" "int4".
const char* kv_dtype_name(KvDtype dtype);
// Accepts kv_dtype_name() spellings (and "float32", "bfloat16", "f8_e4m3", "i8", "i4"); false if
// unknown.
bool parse_kv_dtype(const char* text, KvDtype* out);

}  // namespace sampan
