// GGUF (v2/v3) metadata reader. The file is mapped (MappedFile) and its key/value section parsed
// and bounds-checked up front; values are read from the mapping on request. Tensor data is not
// interpreted here. Errors are one line naming the file and the key: Error(kInvalidModel) for a
// malformed or truncated file or a value of the wrong type, kUnsupported for other versions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/mapped_file.h"

namespace sampan::gguf {

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* value_type_name(ValueType t);

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
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

 private:
  struct Entry {
    ValueType type;
    ValueType elem_type;  // arrays only
    uint64_t count;       // arrays only
    size_t offset;        // of the value (for arrays: of the first element)
  };
  GgufFile() = default;
  const Entry* find(std::string_view key, ValueType type) const;
  int64_t read_int(ValueType t, size_t offset, std::string_view key) const;

  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t tensor_count_ = 0;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace sampan::gguf
