// Writing safetensors files (the format SafetensorsFile reads) and the text files beside them:
// for `sampan quantize`, `merge-lora`, `finetune` and tests.
//
// Tensors are laid out by decreasing element size (8-byte, 4-byte, 2-byte, then 1-byte types)
// and the header is padded with spaces to a multiple of 8 bytes, so every tensor of a file is
// aligned to its element size and the reader maps it without a copy. Packed kI4 tensors
// [..., k] are stored as I8 [..., k / 2] (safetensors has no 4-bit type; the loader views them
// back). Files are written under a temporary name and renamed when complete, so a failed write
// never leaves a truncated file under the final name. Errors: Error(kIo) naming the file,
// Error(kInvalidArgument) for a tensor that cannot be written (non-CPU, duplicate name).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace sampan {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// One file at `path`; `metadata` becomes "__metadata__" (omitted when empty).
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A model directory's weights: model.safetensors when everything fits in max_shard_bytes, else
// model-0000i-of-0000N.safetensors shards (tensors in the given order, a shard closed before it
// would exceed the limit) and model.safetensors.index.json. Returns the file names written.
std::vector<std::string> write_safetensors_dir(const std::string& dir,
                                               const std::vector<NamedTensor>& tensors,
                                               int64_t max_shard_bytes = int64_t{4} << 30);

// A small text file that goes with the weights (an index, a config): written under `path`.tmp and
// renamed when complete, like the safetensors files. Error(kIo) naming the file.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace sampan
