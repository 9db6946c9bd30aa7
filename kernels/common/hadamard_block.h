// The block size of the block-diagonal Walsh-Hadamard transforms (QuaRot-style rotation): shared
// by the model builders that size the online transforms, the offline weight rotation (quant/) and
// the kernels of every backend, so all agree on the block without depending on each other.
#pragma once

#include <cstdint>

namespace sampan {

// The largest power of two dividing n, capped at max_block (n >= 1; 1 for n < 1).
constexpr int64_t hadamard_block_for(int64_t n, int64_t max_block = 1 << 14) {
  if (n < 1) return 1;
  int64_t b = n & -n;  // lowest set bit: the largest power of two dividing n
  while (max_block >= 1 && b > max_block) b >>= 1;
  return b;
}

}  // namespace sampan
