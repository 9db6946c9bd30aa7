// WeightStore: every tensor of a model directory, by name, across safetensors shards.
//
// open(dir) picks the files the way Hugging Face checkpoints are laid out, first match wins:
//   1. model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard file}}.
//      The index is validated: valid JSON, weight_map an object of strings, shard names relative
//      and inside `dir`, every shard present, every mapped tensor present in its shard. Tensors a
//      shard holds beyond the index are kept too.
//   2. model.safetensors alone (other *.safetensors files, e.g. Mistral's consolidated.*, are
//      ignored).
//   3. every *.safetensors file in `dir` (sorted by name).
// Each shard is mapped once. A tensor held by two files is an error in every layout.
//
// Tensors from get() view the mapped files and keep them alive, so they may outlive the store.
// Errors are one line naming the directory or file and the tensor: kNotFound for a missing
// directory, shard or tensor, kInvalidModel for an inconsistent index or a mismatched tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/loaders/safetensors.h"

namespace sampan {

struct WeightInfo {
  std::string name;
  std::string file;  // path of the safetensors file holding it
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t nbytes = 0;
};

class WeightStore {
 public:
  static WeightStore open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Paths of the files opened, in the order they were opened.
  std::vector<std::string> files() const;

  bool has(std::string_view name) const;
  // Throws Error(kNotFound) "<dir>: tensor 'x' is missing".
  WeightInfo info(std::string_view name) const;
  Tensor get(std::string_view name) const;
  // get() plus checks: the shape must equal `expected` (a -1 entry matches any size) and the
  // dtype must be one of `allowed` (empty: any). A mismatch throws Error(kInvalidModel) naming
  // the file and tensor: "<file>: tensor 'x' has shape [4, 8], expected [8, 8]".
  Tensor get_as(std::string_view name, const Shape& expected,
                const std::vector<DType>& allowed = {}) const;

  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return where_.size(); }
  // Elements over all tensors (the usual "parameter count").
  int64_t parameter_count() const;
  int64_t total_bytes() const;
  std::map<DType, int64_t> bytes_by_dtype() const;
  // The index's "metadata" object as compact JSON text ("{}" without an index).
  const std::string& index_metadata() const { return index_metadata_; }

 private:
  WeightStore() = default;
  const SafetensorsFile& file_of(std::string_view name) const;
  void add_file(SafetensorsFile file);
  void open_indexed(const std::string& index_path);

  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, size_t> where_;  // tensor name -> index into files_
  std::string index_metadata_ = "{}";
};

}  // namespace sampan
