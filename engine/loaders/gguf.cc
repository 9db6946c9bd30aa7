#include "engine/loaders/gguf.h"

#include <cstring>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/loaders/json_util.h"

namespace sampan::gguf {
namespace {

constexpr uint64_t kMaxKeys = 1u << 20;
constexpr uint64_t kMaxStringBytes = 1u << 30;
constexpr uint32_t kMaxDims = 4;                 // GGML_MAX_DIMS
constexpr int64_t kMaxElements = int64_t{1} << 62;
constexpr uint64_t kMaxAlignment = 1u << 20;
// Smallest encoding of one tensor-table entry: name length, n_dims, one dim, type, offset.
constexpr uint64_t kMinTensorEntryBytes = 8 + 4 + 8 + 4 + 8;

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: case ValueType::kArray: return 0;
  }
  return 0;
}

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
    case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

// Sequential reader over the mapping that names the file and the construct when it runs out.
class Cursor {
 public:
  explicit Cursor(const MappedFile& f, size_t pos = 0) : f_(f), pos_(pos) {}
  size_t pos() const { return pos_; }
  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, f_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_string(std::string_view what) {
    const auto n = read<uint64_t>(what);
    SAMPAN_CHECK(n <= kMaxStringBytes, ErrorCode::kInvalidModel,
                 "{}: {}: string length {} is implausible", f_.path(), what, n);
    need(n, what);
    std::string_view s(reinterpret_cast<const char*>(f_.data()) + pos_, n);
    pos_ += n;
    return s;
  }
  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

 private:
  void need(uint64_t n, std::string_view what) {
    SAMPAN_CHECK(n <= f_.size() - pos_, ErrorCode::kInvalidModel,
                 "{}: truncated file: {} runs past the end at byte {} of {}", f_.path(), what,
                 pos_, f_.size());
  }
  const MappedFile& f_;
  size_t pos_ = 0;
};

ValueType read_type(Cursor& c, const std::string& path, std::string_view key) {
  const auto t = c.read<uint32_t>(key);
  SAMPAN_CHECK(t <= 12, ErrorCode::kInvalidModel, "{}: key '{}' has unknown value type {}", path,
               key, t);
  return static_cast<ValueType>(t);
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kU8: return "uint8";
    case ValueType::kI8: return "int8";
    case ValueType::kU16: return "uint16";
    case ValueType::kI16: return "int16";
    case ValueType::kU32: return "uint32";
    case ValueType::kI32: return "int32";
    case ValueType::kF32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "uint64";
    case ValueType::kI64: return "int64";
    case ValueType::kF64: return "float64";
  }
  return "?";
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> g(new GgufFile());
  g->file_ = MappedFile::open(path);
  const MappedFile& f = *g->file_;
  Cursor c(f);
  const auto magic = c.read<uint32_t>("magic");
  SAMPAN_CHECK(std::memcmp(&magic, "GGUF", 4) == 0, ErrorCode::kInvalidModel,
               "{}: not a GGUF file (bad magic)", path);
  g->version_ = c.read<uint32_t>("version");
  SAMPAN_CHECK(g->version_ == 2 || g->version_ == 3, ErrorCode::kUnsupported,
               "{}: GGUF version {} is not supported (2 or 3)", path, g->version_);
  g->tensor_count_ = c.read<uint64_t>("tensor count");
  const auto n_kv = c.read<uint64_t>("key/value count");
  SAMPAN_CHECK(n_kv <= kMaxKeys, ErrorCode::kInvalidModel, "{}: key/value count {} is implausible",
               path, n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key(c.read_string(fmt::format("key #{}", i)));
    Entry e{};
    e.type = read_type(c, path, key);
    if (e.type == ValueType::kArray) {
      e.elem_type = read_type(c, path, key);
      SAMPAN_CHECK(e.elem_type != ValueType::kArray, ErrorCode::kUnsupported,
                   "{}: key '{}' is an array of arrays", path, key);
      e.count = c.read<uint64_t>(key);
      e.offset = c.pos();
      if (e.elem_type == ValueType::kString) {
        for (uint64_t k = 0; k < e.count; ++k) c.read_string(key);
      } else {
        const size_t sz = scalar_size(e.elem_type);
        SAMPAN_CHECK(e.count <= (f.size() - c.pos()) / sz, ErrorCode::kInvalidModel,
                     "{}: truncated file: key '{}' ({} {} values) runs past the end", path, key,
                     e.count, value_type_name(e.elem_type));
        c.skip(e.count * sz, key);
      }
    } else {
      e.offset = c.pos();
      if (e.type == ValueType::kString) {
        c.read_string(key);
      } else {
        c.skip(scalar_size(e.type), key);
      }
    }
    SAMPAN_CHECK(g->entries_.emplace(key, e).second, ErrorCode::kInvalidModel,
                 "{}: key '{}' appears twice", path, printable(key));
  }
  if (auto a = g->get_int("general.alignment")) {
    SAMPAN_CHECK(*a >= 1 && static_cast<uint64_t>(*a) <= kMaxAlignment && (*a & (*a - 1)) == 0,
                 ErrorCode::kInvalidModel,
                 "{}: key 'general.alignment' is {}, expected a power of two up to {}", path, *a,
                 kMaxAlignment);
    g->alignment_ = static_cast<uint64_t>(*a);
  }
  g->read_tensor_table(c.pos());
  return g;
}

int64_t TensorInfo::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < dims.size(); ++i) r *= dims[i];
  return r;
}

std::string TensorInfo::str() const {
  std::vector<int64_t> outer_first(dims.rbegin(), dims.rend());
  const char* n = ggml_type_name(type);
  return fmt::format("[{}] {}", fmt::join(outer_first, ", "),
                     n ? std::string(n) : fmt::format("type {}", static_cast<uint32_t>(type)));
}

void GgufFile::read_tensor_table(size_t pos) {
  const std::string& p = path();
  const MappedFile& f = *file_;
  Cursor c(f, pos);
  SAMPAN_CHECK(tensor_count_ <= (f.size() - c.pos()) / kMinTensorEntryBytes,
               ErrorCode::kInvalidModel,
               "{}: tensor count {} is implausible for the {} bytes left after the metadata", p,
               tensor_count_, f.size() - c.pos());
  tensors_.reserve(tensor_count_);
  for (uint64_t i = 0; i < tensor_count_; ++i) {
    TensorInfo t;
    t.name = std::string(c.read_string(fmt::format("the name of tensor #{}", i)));
    const std::string what = fmt::format("tensor '{}'", printable(t.name));
    const auto n_dims = c.read<uint32_t>(what);
    SAMPAN_CHECK(n_dims >= 1 && n_dims <= kMaxDims, ErrorCode::kInvalidModel,
                 "{}: {} has {} dimensions, expected 1 to {}", p, what, n_dims, kMaxDims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = c.read<uint64_t>(what);
      SAMPAN_CHECK(dim >= 1 && dim <= static_cast<uint64_t>(kMaxElements) &&
                       static_cast<int64_t>(dim) <= kMaxElements / elements,
                   ErrorCode::kInvalidModel, "{}: {} has dimension {} = {}, out of range", p, what,
                   d, dim);
      t.dims.push_back(static_cast<int64_t>(dim));
      elements *= static_cast<int64_t>(dim);
    }
    const auto type = c.read<uint32_t>(what);
    t.type = static_cast<GgmlType>(type);
    const int64_t block = ggml_block_size(t.type);
    SAMPAN_CHECK(block > 0, ErrorCode::kInvalidModel, "{}: {} has unknown type {}", p, what, type);
    SAMPAN_CHECK(t.dims[0] % block == 0, ErrorCode::kInvalidModel,
                 "{}: {} has {} elements per row, not a multiple of {}'s block of {}", p, what,
                 t.dims[0], ggml_type_name(t.type), block);
    const int64_t row = ggml_row_bytes(t.type, t.dims[0]);
    SAMPAN_CHECK(row > 0, ErrorCode::kInvalidModel, "{}: {} is too large ({} elements per row)",
                 p, what, t.dims[0]);
    const uint64_t row_bytes = static_cast<uint64_t>(row);
    const uint64_t rows = static_cast<uint64_t>(t.rows());
    SAMPAN_CHECK(rows <= UINT64_MAX / row_bytes, ErrorCode::kInvalidModel,
                 "{}: {} is too large", p, what);
    t.nbytes = row_bytes * rows;
    t.offset = c.read<uint64_t>(what);
    SAMPAN_CHECK(tensor_index_.emplace(t.name, tensors_.size()).second, ErrorCode::kInvalidModel,
                 "{}: {} appears twice in the tensor table", p, what);
    tensors_.push_back(std::move(t));
  }
  if (tensors_.empty()) return;
  // The data section starts at the next multiple of the alignment; offsets are relative to it.
  const uint64_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  SAMPAN_CHECK(data_start <= f.size(), ErrorCode::kInvalidModel,
               "{}: truncated file: the tensor data section would start at byte {} of {}", p,
               data_start, f.size());
  const uint64_t data_bytes = f.size() - data_start;
  for (TensorInfo& t : tensors_) {
    const std::string what = fmt::format("tensor '{}'", printable(t.name));
    SAMPAN_CHECK(t.offset % alignment_ == 0, ErrorCode::kInvalidModel,
                 "{}: {} has offset {}, not a multiple of the alignment {}", p, what, t.offset,
                 alignment_);
    SAMPAN_CHECK(t.offset <= data_bytes && t.nbytes <= data_bytes - t.offset,
                 ErrorCode::kInvalidModel,
                 "{}: {} ({} bytes at offset {}) runs past the end of the data section ({} bytes)",
                 p, what, t.nbytes, t.offset, data_bytes);
    t.offset += data_start;
  }
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  const Entry& e = it->second;
  const uint8_t* p = file_->data() + e.offset;
  if (e.type == ValueType::kF32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (e.type == ValueType::kF64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  fail(ErrorCode::kInvalidModel, "{}: key '{}' is {}, expected a float", path(), key,
       value_type_name(e.type));
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : entries_) out.push_back(k);
  return out;
}

const GgufFile::Entry* GgufFile::find(std::string_view key, ValueType type) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  const bool ok = e.type == type || (type == ValueType::kU64 && is_integer(e.type));
  SAMPAN_CHECK(ok, ErrorCode::kInvalidModel, "{}: key '{}' is {}, expected {}", path(), key,
               value_type_name(e.type), type == ValueType::kU64 ? "an integer" : value_type_name(type));
  return &e;
}

int64_t GgufFile::read_int(ValueType t, size_t offset, std::string_view key) const {
  const uint8_t* p = file_->data() + offset;
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (t) {
    case ValueType::kU8: return load(uint8_t{});
    case ValueType::kI8: return load(int8_t{});
    case ValueType::kU16: return load(uint16_t{});
    case ValueType::kI16: return load(int16_t{});
    case ValueType::kU32: return load(uint32_t{});
    case ValueType::kI32: return load(int32_t{});
    case ValueType::kI64: return load(int64_t{});
    case ValueType::kU64: {
      const uint64_t v = load(uint64_t{});
      SAMPAN_CHECK(v <= static_cast<uint64_t>(INT64_MAX), ErrorCode::kInvalidModel,
                   "{}: key '{}' value {} is out of range", path(), key, v);
      return static_cast<int64_t>(v);
    }
    default:
      fail(ErrorCode::kInvalidModel, "{}: key '{}' is {}, expected an integer", path(), key,
           value_type_name(t));
  }
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const Entry* e = find(key, ValueType::kString);
  if (!e) return std::nullopt;
  uint64_t n;
  std::memcpy(&n, file_->data() + e->offset, 8);
  return std::string(reinterpret_cast<const char*>(file_->data()) + e->offset + 8, n);
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Entry* e = find(key, ValueType::kU64);
  if (!e) return std::nullopt;
  return read_int(e->type, e->offset, key);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Entry* e = find(key, ValueType::kBool);
  if (!e) return std::nullopt;
  return file_->data()[e->offset] != 0;
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const Entry* e = find(key, ValueType::kArray);
  if (!e) return std::nullopt;
  SAMPAN_CHECK(e->elem_type == ValueType::kString, ErrorCode::kInvalidModel,
               "{}: key '{}' is an array of {}, expected strings", path(), key,
               value_type_name(e->elem_type));
  std::vector<std::string> out;
  out.reserve(e->count);
  size_t pos = e->offset;
  for (uint64_t i = 0; i < e->count; ++i) {
    uint64_t n;
    std::memcpy(&n, file_->data() + pos, 8);
    out.emplace_back(reinterpret_cast<const char*>(file_->data()) + pos + 8, n);
    pos += 8 + n;
  }
  return out;
}

std::optional<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
  const Entry* e = find(key, ValueType::kArray);
  if (!e) return std::nullopt;
  SAMPAN_CHECK(e->elem_type == ValueType::kF32, ErrorCode::kInvalidModel,
               "{}: key '{}' is an array of {}, expected float32", path(), key,
               value_type_name(e->elem_type));
  std::vector<float> out(e->count);
  if (e->count) std::memcpy(out.data(), file_->data() + e->offset, e->count * sizeof(float));
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const Entry* e = find(key, ValueType::kArray);
  if (!e) return std::nullopt;
  SAMPAN_CHECK(is_integer(e->elem_type), ErrorCode::kInvalidModel,
               "{}: key '{}' is an array of {}, expected integers", path(), key,
               value_type_name(e->elem_type));
  std::vector<int64_t> out(e->count);
  const size_t sz = scalar_size(e->elem_type);
  for (uint64_t i = 0; i < e->count; ++i) out[i] = read_int(e->elem_type, e->offset + i * sz, key);
  return out;
}

}  // namespace sampan::gguf
