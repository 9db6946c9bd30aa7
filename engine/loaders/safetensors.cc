#include "engine/loaders/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/loaders/json_util.h"

namespace sampan {

using nlohmann::json;

// ---- SafetensorsFile ----------------------------------------------------------------------------

namespace {

// Safetensors headers are three levels deep (root -> tensor -> shape); anything much deeper is
// not a safetensors header.
constexpr int kMaxHeaderDepth = 8;

// The value as a non-negative integer, or false when it is anything else (negative, fractional,
// a string, ...).
bool as_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

uint64_t read_u64_le(const uint8_t* p /* [8] */) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.file_ = MappedFile::open(path);
  const uint64_t size = f.file_->size();
  SAMPAN_CHECK(size >= 8, ErrorCode::kInvalidModel,
               "{}: file is {} bytes, too small for a safetensors header length (8 bytes)", path,
               size);
  const uint64_t header_len = read_u64_le(f.file_->data());
  SAMPAN_CHECK(header_len <= kMaxHeaderBytes, ErrorCode::kInvalidModel,
               "{}: header length {} exceeds the {}-byte limit (corrupt or not a safetensors file)",
               path, header_len, kMaxHeaderBytes);
  SAMPAN_CHECK(header_len <= size - 8, ErrorCode::kInvalidModel,
               "{}: header length {} runs past the end of the file ({} bytes after the length "
               "field)",
               path, header_len, size - 8);
  SAMPAN_CHECK(header_len >= 2, ErrorCode::kInvalidModel,
               "{}: header length {} is too small for a JSON object", path, header_len);
  f.data_offset_ = 8 + header_len;
  f.data_size_ = size - f.data_offset_;

  const std::string_view header(reinterpret_cast<const char*>(f.file_->data() + 8), header_len);
  // The format requires the header to start with '{' (it may end with space padding).
  SAMPAN_CHECK(header[0] == '{', ErrorCode::kInvalidModel,
               "{}: header does not start with '{{' (not a safetensors file?)", path);
  f.parse_header(header);

  f.storage_ = Storage::wrap_mapped(f.file_->data() + f.data_offset_,
                                    static_cast<size_t>(f.data_size_), f.file_);
  if (header_len % 8 != 0 && !f.tensors_.empty()) {
    log::debug("{}: header length {} is not a multiple of 8; misaligned tensors will be copied",
               path, header_len);
  }
  return f;
}

void SafetensorsFile::parse_header(std::string_view header) {
  const std::string& path = path_;
  const json root = parse_json_strict(header, path, "header", kMaxHeaderDepth);
  SAMPAN_CHECK(root.is_object(), ErrorCode::kInvalidModel, "{}: header is {}, expected an object",
               path, json_kind(root));

  tensors_.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    const std::string pname = printable(name);
    if (name == "__metadata__") {
      SAMPAN_CHECK(entry.is_object(), ErrorCode::kInvalidModel,
                   "{}: '__metadata__' is {}, expected an object of strings", path,
                   json_kind(entry));
      for (const auto& [key, value] : entry.items()) {
        SAMPAN_CHECK(value.is_string(), ErrorCode::kInvalidModel,
                     "{}: '__metadata__' key '{}' is {}, expected a string", path, printable(key),
                     json_kind(value));
        metadata_.emplace(key, value.get<std::string>());
      }
      continue;
    }

    SAMPAN_CHECK(entry.is_object(), ErrorCode::kInvalidModel,
                 "{}: tensor '{}': entry is {}, expected an object", path, pname,
                 json_kind(entry));
    for (const auto& [key, value] : entry.items()) {
      SAMPAN_CHECK(key == "dtype" || key == "shape" || key == "data_offsets",
                   ErrorCode::kInvalidModel, "{}: tensor '{}': unknown key '{}'", path, pname,
                   printable(key));
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      SAMPAN_CHECK(entry.contains(key), ErrorCode::kInvalidModel,
                   "{}: tensor '{}': missing '{}'", path, pname, key);
    }

    SafetensorsTensorInfo t;
    t.name = name;

    const json& dtype = entry["dtype"];
    SAMPAN_CHECK(dtype.is_string(), ErrorCode::kInvalidModel,
                 "{}: tensor '{}': dtype is {}, expected a string", path, pname, json_kind(dtype));
    const auto parsed = dtype_from_safetensors(dtype.get_ref<const std::string&>());
    SAMPAN_CHECK(parsed.has_value(), ErrorCode::kUnsupported,
                 "{}: tensor '{}': dtype '{}' is not supported (supported: F32, F16, BF16, "
                 "F8_E4M3, I8, I32, I64)",
                 path, pname, printable(dtype.get_ref<const std::string&>()));
    t.dtype = *parsed;

    const json& shape = entry["shape"];
    SAMPAN_CHECK(shape.is_array(), ErrorCode::kInvalidModel,
                 "{}: tensor '{}': shape is {}, expected an array", path, pname, json_kind(shape));
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : shape) {
      uint64_t v = 0;
      SAMPAN_CHECK(as_u64(d, &v) && v <= static_cast<uint64_t>(INT64_MAX),
                   ErrorCode::kInvalidModel,
                   "{}: tensor '{}': shape {} must hold non-negative integers", path, pname,
                   printable(shape.dump()));
      t.shape.push_back(static_cast<int64_t>(v));
      overflow = overflow || __builtin_mul_overflow(numel, v, &numel);
    }
    uint64_t need = 0;
    overflow = overflow || __builtin_mul_overflow(numel, uint64_t(dtype_bits(t.dtype) / 8), &need);
    SAMPAN_CHECK(!overflow && numel <= static_cast<uint64_t>(INT64_MAX), ErrorCode::kInvalidModel,
                 "{}: tensor '{}': {}{} has more bytes than 64 bits can count", path, pname,
                 dtype_name(t.dtype), shape_str(t.shape));

    const json& offsets = entry["data_offsets"];
    SAMPAN_CHECK(offsets.is_array() && offsets.size() == 2 && as_u64(offsets[0], &t.data_begin) &&
                     as_u64(offsets[1], &t.data_end),
                 ErrorCode::kInvalidModel,
                 "{}: tensor '{}': data_offsets {} must be [begin, end] with non-negative "
                 "integers",
                 path, pname, printable(offsets.dump()));
    SAMPAN_CHECK(t.data_begin <= t.data_end, ErrorCode::kInvalidModel,
                 "{}: tensor '{}': data_offsets [{}, {}] end before they begin", path, pname,
                 t.data_begin, t.data_end);
    SAMPAN_CHECK(t.data_end <= data_size_, ErrorCode::kInvalidModel,
                 "{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)",
                 path, pname, t.data_begin, t.data_end, data_size_);
    SAMPAN_CHECK(t.nbytes() == need, ErrorCode::kInvalidModel,
                 "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but {}{} needs {}", path,
                 pname, t.data_begin, t.data_end, t.nbytes(), dtype_name(t.dtype),
                 shape_str(t.shape), need);
    tensors_.push_back(std::move(t));
  }

  // File order; names break ties between empty tensors at the same offset.
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    if (a.data_begin != b.data_begin) return a.data_begin < b.data_begin;
    if (a.data_end != b.data_end) return a.data_end < b.data_end;
    return a.name < b.name;
  });
  // The tensors must tile the data section exactly: a hole or an overlap means the header and
  // the bytes disagree, and bytes nobody indexes usually mean a truncated or spliced file.
  uint64_t cursor = 0;
  const SafetensorsTensorInfo* prev = nullptr;
  for (const auto& t : tensors_) {
    if (t.data_begin < cursor) {
      fail(ErrorCode::kInvalidModel,
           "{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]", path,
           printable(t.name), t.data_begin, t.data_end, printable(prev->name), prev->data_begin,
           prev->data_end);
    }
    if (t.data_begin > cursor) {
      fail(ErrorCode::kInvalidModel,
           "{}: tensor '{}': data_offsets [{}, {}] leave bytes [{}, {}) of the data section "
           "unindexed (a hole)",
           path, printable(t.name), t.data_begin, t.data_end, cursor, t.data_begin);
    }
    cursor = t.data_end;
    prev = &t;
  }
  SAMPAN_CHECK(cursor == data_size_, ErrorCode::kInvalidModel,
               "{}: bytes [{}, {}) at the end of the data section are not indexed by any tensor",
               path, cursor, data_size_);

  names_.reserve(tensors_.size());
  index_.reserve(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    names_.push_back(tensors_[i].name);
    index_.emplace(tensors_[i].name, i);
  }
}

bool SafetensorsFile::has(std::string_view name) const {
  return index_.find(std::string(name)) != index_.end();
}

const SafetensorsTensorInfo& SafetensorsFile::info(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  SAMPAN_CHECK(it != index_.end(), ErrorCode::kNotFound, "{}: tensor '{}' is missing", path_,
               printable(name));
  return tensors_[it->second];
}

Tensor SafetensorsFile::get(std::string_view name) const {
  const SafetensorsTensorInfo& t = info(name);
  const uint8_t* bytes = file_->data() + data_offset_ + t.data_begin;
  const size_t align = static_cast<size_t>(dtype_bits(t.dtype) / 8);
  if (t.nbytes() == 0 || reinterpret_cast<uintptr_t>(bytes) % align == 0) {
    return Tensor::from_storage(storage_, static_cast<size_t>(t.data_begin), t.shape, t.dtype);
  }
  // Typed kernels must not see a misaligned pointer (undefined behaviour, and slow on some
  // paths); one aligned copy is the price of a file whose writer did not pad.
  log::debug("{}: tensor '{}' is not {}-byte aligned in the file; copying it", path_,
             printable(t.name), align);
  Tensor copy = Tensor::empty(t.shape, t.dtype);
  if (t.nbytes() > 0) std::memcpy(copy.raw(), bytes, static_cast<size_t>(t.nbytes()));
  return copy;
}

}  // namespace sampan
