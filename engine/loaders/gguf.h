// GGUF (v2/v3) reader. The file is mapped (MappedFile); its key/value section and tensor table are
// parsed and bounds-checked up front; values are read from the mapping on request. Tensor data is
// viewed, not interpreted, here (the block formats: kernels/common/ggml_type.h).
//
// Checked when the file opens, each failure one line naming the file and the key or tensor:
// magic and version (2 or 3; others kUnsupported), counts and string lengths against the file
// size, value and tensor types, duplicate keys and tensor names, general.alignment (a power of
// two, default 32), every tensor's rank (1..4), dimensions (>= 1, product below 2^62), type
// (a known ggml type id; a first dimension that is a whole number of its blocks), offset (a
// multiple of the alignment) and extent (inside the file's data section). Error(kInvalidModel)
// for a malformed or truncated file or a value of the wrong type.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/mapped_file.h"
#include "kernels/common/ggml_type.h"

namespace sampan::gguf {

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* value_type_name(ValueType t);

// One entry of the tensor table.
struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  // In GGUF order: dims[0] is the innermost (contiguous) dimension, so a [rows, cols] matrix is
  // stored as dims {cols, rows}.
  std::vector<int64_t> dims;
  uint64_t offset = 0;  // of the first byte, from the start of the file
  uint64_t nbytes = 0;
  // Rows of the innermost dimension (product of dims[1..]) and bytes per row.
  int64_t rows() const;
  int64_t row_bytes() const { return rows() == 0 ? 0 : static_cast<int64_t>(nbytes) / rows(); }
  // "[4096, 32000] Q4_K" style, outermost first (as a matrix reads).
  std::string str() const;
};

class GgufFile {
 public:
  static std::shared_ptr<const GgufFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  uint64_t tensor_count() const { return tensor_count_; }
  bool has(std::string_view key) const { return entries_.count(std::string(key)) != 0; }
  std::vector<std::string> keys() const;

  // Each getter returns nullopt when the key is absent and throws when it has another type.
  // Integer getters accept any integer type whose value fits.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Accepts float32 and float64 values.
  std::optional<double> get_float(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

  // The tensor table, in file order, and lookup by name (nullptr when absent).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // The tensor's bytes in the mapping ([info.nbytes]); valid while the file is alive.
  const uint8_t* tensor_data(const TensorInfo& info) const { return file_->data() + info.offset; }
  const std::shared_ptr<const MappedFile>& mapping() const { return file_; }
  uint64_t alignment() const { return alignment_; }

 private:
  struct Entry {
    ValueType type;
    ValueType elem_type;  // arrays only
    uint64_t count;       // arrays only
    size_t offset;        // of the value (for arrays: of the first element)
  };
  GgufFile() = default;
  // Parses the tensor table that starts at byte `pos` (just after the key/value section).
  void read_tensor_table(size_t pos);
  const Entry* find(std::string_view key, ValueType type) const;
  int64_t read_int(ValueType t, size_t offset, std::string_view key) const;

  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t tensor_count_ = 0;
  std::map<std::string, Entry, std::less<>> entries_;
  uint64_t alignment_ = 32;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace sampan::gguf
