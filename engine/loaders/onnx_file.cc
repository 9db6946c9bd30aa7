#include "engine/loaders/onnx_file.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "engine/core/error.h"
#include "engine/core/mapped_file.h"
#include "proto/formats/onnx.pb.h"

namespace sampan::onnx {
namespace {

namespace pb = onnx_format;
namespace fs = std::filesystem;

// TensorProto.DataType values (onnx.proto).
enum OnnxType : int32_t {
  kFloat = 1, kUint8 = 2, kInt8 = 3, kUint16 = 4, kInt16 = 5, kInt32 = 6, kInt64 = 7,
  kString = 8, kBool = 9, kFloat16 = 10, kDouble = 11, kUint32 = 12, kUint64 = 13,
  kComplex64 = 14, kComplex128 = 15, kBfloat16 = 16,
};

// Bytes per element as stored in raw_data; 0 for a type Sampan does not read.
int64_t stored_bytes(int32_t t) {
  switch (t) {
    case kFloat: case kInt32: case kUint32: return 4;
    case kUint8: case kInt8: case kBool: return 1;
    case kUint16: case kInt16: case kFloat16: case kBfloat16: return 2;
    case kInt64: case kUint64: case kDouble: return 8;
    default: return 0;
  }
}

float half_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -24);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  const uint32_t bits = sign | (exp == 31 ? (0xffu << 23) | (man << 13) : ((exp + 112) << 23) | (man << 13));
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// External data files, mapped once per file and shared by the tensors that view them.
struct ExternalFiles {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const MappedFile>> files;
};

std::shared_ptr<const MappedFile> map_external(const OnnxFile& file, const std::string& location,
                                               const std::string& what) {
  static ExternalFiles cache;  // keyed by absolute path; entries live as long as the process
  const fs::path rel(location);
  SAMPAN_CHECK(!location.empty() && rel.is_relative(), ErrorCode::kInvalidArgument,
               "{}: {}: external data location '{}' must be a path relative to the model's "
               "directory", file.path, what, location);
  for (const auto& part : rel) {
    SAMPAN_CHECK(part != "..", ErrorCode::kInvalidArgument,
                 "{}: {}: external data location '{}' leaves the model's directory", file.path,
                 what, location);
  }
  const std::string full = (fs::path(file.directory) / rel).lexically_normal().string();
  std::lock_guard<std::mutex> lock(cache.mu);
  auto it = cache.files.find(full);
  if (it != cache.files.end()) return it->second;
  try {
    auto mapped = MappedFile::open(full);
    cache.files[full] = mapped;
    return mapped;
  } catch (const Error& e) {
    fail(e.code(), "{}: {}: external data: {}", file.path, what, e.what());
  }
}

int64_t parse_int(const OnnxFile& file, const std::string& what, const std::string& key,
                  const std::string& text) {
  int64_t v = 0;
  SAMPAN_CHECK(!text.empty() && text.size() <= 18 &&
                   text.find_first_not_of("0123456789") == std::string::npos,
               ErrorCode::kInvalidArgument, "{}: {}: external data {} '{}' is not a number",
               file.path, what, key, text);
  v = std::stoll(text);
  return v;
}

// Typed-field data: copies `values` (one per element) into a new tensor of `dtype`.
template <class T, class Src>
Tensor copy_values(const Shape& shape, DType dtype, const Src& values, int64_t numel,
                   const OnnxFile& file, const std::string& what) {
  SAMPAN_CHECK(static_cast<int64_t>(values.size()) == numel, ErrorCode::kInvalidArgument,
               "{}: {}: holds {} values for {} elements of shape {}", file.path, what,
               values.size(), numel, shape_str(shape));
  Tensor t = Tensor::empty(shape, dtype);
  T* out = t.data<T>();
  for (int64_t i = 0; i < numel; ++i) out[i] = static_cast<T>(values[static_cast<int>(i)]);
  return t;
}

}  // namespace

const char* onnx_dtype_name(int32_t t) {
  switch (t) {
    case kFloat: return "FLOAT";
    case kUint8: return "UINT8";
    case kInt8: return "INT8";
    case kUint16: return "UINT16";
    case kInt16: return "INT16";
    case kInt32: return "INT32";
    case kInt64: return "INT64";
    case kString: return "STRING";
    case kBool: return "BOOL";
    case kFloat16: return "FLOAT16";
    case kDouble: return "DOUBLE";
    case kUint32: return "UINT32";
    case kUint64: return "UINT64";
    case kComplex64: return "COMPLEX64";
    case kComplex128: return "COMPLEX128";
    case kBfloat16: return "BFLOAT16";
    default: return "an unknown type";
  }
}

DType onnx_dtype(int32_t t, const std::string& what) {
  switch (t) {
    case kFloat: case kFloat16: case kBfloat16: case kDouble: return DType::kF32;
    case kInt32: return DType::kI32;
    case kInt64: return DType::kI64;
    case kBool: return DType::kBool;
    case kUint8: return DType::kU8;
    case kInt8: return DType::kI8;
    default:
      fail(ErrorCode::kUnsupported, "{}: data type {} ({}) is not supported", what,
           onnx_dtype_name(t), t);
  }
}

OnnxFile read_onnx(const std::string& path) {
  const auto mapped = MappedFile::open(path);
  return parse_onnx(mapped->data(), mapped->size(), path);
}

OnnxFile parse_onnx(const void* data, size_t size, const std::string& path) {
  OnnxFile file;
  file.path = path;
  file.directory = fs::path(path).parent_path().string();
  if (file.directory.empty()) file.directory = ".";
  SAMPAN_CHECK(size < static_cast<size_t>(INT_MAX), ErrorCode::kUnsupported,
               "{}: {} bytes; ONNX files over 2 GiB must keep their weights in external data",
               path, size);
  auto model = std::make_shared<pb::ModelProto>();
  SAMPAN_CHECK(size > 0 && model->ParseFromArray(data, static_cast<int>(size)),
               ErrorCode::kInvalidArgument,
               "{}: not an ONNX model (the file does not parse as a ModelProto: truncated or "
               "another format)", path);
  SAMPAN_CHECK(model->has_graph() && model->ir_version() > 0, ErrorCode::kInvalidArgument,
               "{}: not an ONNX model (no graph or IR version)", path);
  SAMPAN_CHECK(model->functions_size() == 0, ErrorCode::kUnsupported,
               "{}: model-local function '{}' is not supported", path,
               model->functions(0).name());
  for (const auto& op : model->opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") {
      file.opset = op.version();
    } else if (op.domain() != "ai.onnx.ml") {
      // Only a node that uses a domain makes the model unrunnable; the importer names it.
    }
  }
  SAMPAN_CHECK(file.opset >= kMinOpset && file.opset <= kMaxOpset, ErrorCode::kUnsupported,
               "{}: opset {} is not supported (the default domain's opsets {} to {} are)", path,
               file.opset, kMinOpset, kMaxOpset);
  file.model = std::move(model);
  return file;
}

Tensor onnx_tensor(const OnnxFile& file, const pb::TensorProto& t, const std::string& what) {
  const int32_t type = t.data_type();
  const DType dtype = onnx_dtype(type, fmt::format("{}: {}", file.path, what));
  SAMPAN_CHECK(t.segment().empty(), ErrorCode::kUnsupported, "{}: {}: segmented tensors are not "
               "supported", file.path, what);
  Shape shape;
  int64_t numel = 1;
  // The product of the non-zero dimensions is bounded too: strides multiply all of them even
  // when another dimension is 0.
  int64_t span = 1;
  SAMPAN_CHECK(t.dims_size() <= 16, ErrorCode::kInvalidArgument, "{}: {}: {} dimensions",
               file.path, what, t.dims_size());
  for (int64_t d : t.dims()) {
    SAMPAN_CHECK(d >= 0 && (d == 0 || span <= (int64_t{1} << 40) / d),
                 ErrorCode::kInvalidArgument, "{}: {}: bad dimensions {}", file.path, what,
                 fmt::join(t.dims(), ", "));
    numel *= d;
    if (d > 0) span *= d;
    shape.push_back(d);
  }
  const int64_t elem = stored_bytes(type);
  const int64_t need = numel * elem;

  // Raw bytes, in the message or in an external file.
  const uint8_t* raw = nullptr;
  int64_t raw_bytes = -1;
  std::shared_ptr<const void> keepalive;
  if (t.data_location() == 1) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : t.external_data()) {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = parse_int(file, what, "offset", kv.value());
      else if (kv.key() == "length") length = parse_int(file, what, "length", kv.value());
    }
    const auto ext = map_external(file, location, what);
    if (length < 0) length = need;
    SAMPAN_CHECK(length == need, ErrorCode::kInvalidArgument,
                 "{}: {}: external data length {} is not the {} bytes of shape {} {}", file.path,
                 what, length, need, shape_str(shape), onnx_dtype_name(type));
    SAMPAN_CHECK(offset <= static_cast<int64_t>(ext->size()) &&
                     length <= static_cast<int64_t>(ext->size()) - offset,
                 ErrorCode::kInvalidArgument,
                 "{}: {}: external data [{}, {}) lies past the end of '{}' ({} bytes)", file.path,
                 what, offset, offset + length, location, ext->size());
    raw = ext->data() + offset;
    raw_bytes = length;
    keepalive = ext;
  } else if (!t.raw_data().empty() || (need == 0 && elem > 0)) {
    raw = reinterpret_cast<const uint8_t*>(t.raw_data().data());
    raw_bytes = static_cast<int64_t>(t.raw_data().size());
    keepalive = file.model;
  }
  if (raw_bytes >= 0) {
    SAMPAN_CHECK(raw_bytes == need, ErrorCode::kInvalidArgument,
                 "{}: {}: {} bytes of data for shape {} {} ({} bytes)", file.path, what,
                 raw_bytes, shape_str(shape), onnx_dtype_name(type), need);
    const bool same = (type == kFloat || type == kInt32 || type == kInt64 || type == kBool ||
                       type == kUint8 || type == kInt8);
    const bool aligned = reinterpret_cast<uintptr_t>(raw) % std::max<int64_t>(elem, 1) == 0;
    if (same && aligned) {
      auto storage = Storage::wrap_read_only(raw, static_cast<size_t>(need), Device::cpu(),
                                             std::move(keepalive));
      return Tensor::from_storage(std::move(storage), 0, shape, dtype);
    }
    Tensor out = Tensor::empty(shape, dtype);
    if (same) {
      if (need > 0) std::memcpy(out.raw(), raw, static_cast<size_t>(need));
      return out;
    }
    float* y = out.data<float>();
    for (int64_t i = 0; i < numel; ++i) {
      uint16_t h;
      switch (type) {
        case kFloat16: std::memcpy(&h, raw + 2 * i, 2); y[i] = half_to_f32(h); break;
        case kBfloat16: std::memcpy(&h, raw + 2 * i, 2); y[i] = bf16_to_f32(h); break;
        case kDouble: {
          double d;
          std::memcpy(&d, raw + 8 * i, 8);
          y[i] = static_cast<float>(d);
          break;
        }
        default: break;
      }
    }
    return out;
  }
  switch (type) {
    case kFloat: return copy_values<float>(shape, dtype, t.float_data(), numel, file, what);
    case kDouble: return copy_values<float>(shape, dtype, t.double_data(), numel, file, what);
    case kInt64: return copy_values<int64_t>(shape, dtype, t.int64_data(), numel, file, what);
    case kInt32: return copy_values<int32_t>(shape, dtype, t.int32_data(), numel, file, what);
    case kInt8: return copy_values<int8_t>(shape, dtype, t.int32_data(), numel, file, what);
    case kUint8: case kBool:
      return copy_values<uint8_t>(shape, dtype, t.int32_data(), numel, file, what);
    case kFloat16: case kBfloat16: {
      SAMPAN_CHECK(t.int32_data_size() == numel, ErrorCode::kInvalidArgument,
                   "{}: {}: holds {} values for {} elements", file.path, what,
                   t.int32_data_size(), numel);
      Tensor out = Tensor::empty(shape, dtype);
      for (int64_t i = 0; i < numel; ++i) {
        const auto h = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
        out.data<float>()[i] = type == kFloat16 ? half_to_f32(h) : bf16_to_f32(h);
      }
      return out;
    }
    default:
      fail(ErrorCode::kUnsupported, "{}: {}: data type {} is not supported", file.path, what,
           onnx_dtype_name(type));
  }
}

}  // namespace sampan::onnx
