// Element types shared by every layer. It lives with the kernels (the lowest layer) so that
// kernels can name a weight type without depending on engine/.
#pragma once

#include <cstdint>

namespace sampan {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // OCP FP8 E4M3 (finite-only, max 448)
  kI8,
  kI4,      // two signed 4-bit values per byte, element 2i in the low nibble
  kI32,
  kI64,
  kU8,
  kBool,  // one byte per element, 0 or 1 (ONNX/Paddle masks and comparisons)
};

// Bits per element; kI4 is 4, every other type a whole number of bytes.
constexpr int dtype_bits(DType t) {
  switch (t) {
    case DType::kF32: return 32;
    case DType::kF16: return 16;
    case DType::kBF16: return 16;
    case DType::kF8E4M3: return 8;
    case DType::kI8: return 8;
    case DType::kI4: return 4;
    case DType::kI32: return 32;
    case DType::kI64: return 64;
    case DType::kU8: return 8;
    case DType::kBool: return 8;
  }
  return 0;
}

// Bytes taken by n elements stored densely (kI4 rounds up to a whole byte).
constexpr int64_t dtype_storage_bytes(DType t, int64_t n) {
  return (n * dtype_bits(t) + 7) / 8;
}

}  // namespace sampan
