// SafetensorsFile: a zero-copy reader for the safetensors format.
//
// Layout: u64 little-endian N, then N bytes of UTF-8 JSON header, then the data section. The
// header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the data section) and may hold "__metadata__", a string -> string map.
//
// open() validates the whole header up front, so every later call works on a consistent file:
// known dtypes, non-negative shapes, offsets inside the data section whose size matches dtype x
// shape, and tensors that cover the data section exactly (no holes, no overlaps, no trailing
// bytes), no duplicate names. Every error is one line naming the file and, where it concerns a
// tensor, the tensor: Error(kInvalidModel), or Error(kUnsupported) for a dtype Sampan lacks.
//
// get() returns CPU tensors that view the mapped bytes (read-only: writing into them faults) and
// keep the mapping alive, so they may outlive the SafetensorsFile. A tensor whose bytes are not
// aligned to its element size (possible when a writer did not pad) is copied once instead, so
// kernels never see misaligned typed pointers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/core/mapped_file.h"
#include "engine/core/tensor.h"

namespace sampan {

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  // Byte range [data_begin, data_end) relative to the start of the data section.
  uint64_t data_begin = 0;
  uint64_t data_end = 0;
  uint64_t nbytes() const { return data_end - data_begin; }
};

class SafetensorsFile {
 public:
  // The largest header accepted: real headers are a few hundred KB; a bigger length field means a
  // corrupt or hostile file (the reference implementation uses the same bound).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and validates `path`. Errors: kNotFound / kIo from mapping the file, kInvalidModel for a
  // malformed file, kUnsupported for a dtype Sampan does not handle.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensor names in the order their bytes appear in the file (ties, e.g. empty tensors sharing an
  // offset, ordered by name).
  const std::vector<std::string>& names() const { return names_; }
  size_t size() const { return names_.size(); }
  bool has(std::string_view name) const;
  // Throws Error(kNotFound) "<path>: tensor 'x' is missing" for an unknown name.
  const SafetensorsTensorInfo& info(std::string_view name) const;
  // A CPU tensor over the mapped bytes (see the header comment for the one copying exception).
  Tensor get(std::string_view name) const;
  // The "__metadata__" map; empty when the header has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const MappedFile& mapping() const { return *file_; }
  // Offset of the data section within the file (8 + header length).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t data_size() const { return data_size_; }

 private:
  SafetensorsFile() = default;
  void parse_header(std::string_view header);

  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  std::shared_ptr<Storage> storage_;  // views the data section; shared by every tensor
  uint64_t data_offset_ = 0;
  uint64_t data_size_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;  // file order
  std::vector<std::string> names_;              // file order
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace sampan
