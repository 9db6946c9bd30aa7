// NumPy .npy files (format 1.0), little-endian, C order. Written by `sampan logits`.
#pragma once

#include <string>

#include "engine/core/tensor.h"

namespace sampan {

// Writes a CPU tensor of f32, i32, i64, u8 or bool; throws Error(kIo) naming the path on failure.
void write_npy(const std::string& path, const Tensor& tensor);
// Reads f32/i32/i64/u8/bool arrays written by write_npy or numpy.save (C order, little-endian).
Tensor read_npy(const std::string& path);

}  // namespace sampan
