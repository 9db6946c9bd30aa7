#include "engine/loaders/gguf.h"

#include <cstring>

#include "engine/core/error.h"
#include "engine/loaders/json_util.h"

namespace sampan::gguf {
namespace {

constexpr uint64_t kMaxKeys = 1u << 20;
constexpr uint64_t kMaxStringBytes = 1u << 30;

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
  Cursor(const MappedFile& f) : f_(f) {}
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
  return g;
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
