#include "engine/core/npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>

#include "engine/core/error.h"

namespace sampan {
namespace {

const char* descr(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kI32: return "<i4";
    case DType::kI64: return "<i8";
    case DType::kU8: return "|u1";
    case DType::kBool: return "|b1";
    default: return nullptr;
  }
}

}  // namespace

void write_npy(const std::string& path, const Tensor& tensor) {
  const char* d = descr(tensor.dtype());
  SAMPAN_CHECK(d != nullptr, ErrorCode::kUnsupported, "{}: cannot write {} tensors as .npy", path,
               dtype_name(tensor.dtype()));
  const Tensor t = tensor.contiguous();
  std::string shape = "(";
  for (int64_t s : t.shape()) shape += std::to_string(s) + ",";
  if (t.rank() > 1) shape.pop_back();
  shape += ")";
  std::string header =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", d, shape);
  // Pad so the data starts on a 64-byte boundary; the header ends with a newline.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SAMPAN_CHECK(out.good(), ErrorCode::kIo, "{}: cannot open for writing: {}", path,
               std::strerror(errno));
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(t.raw()), t.nbytes());
  out.close();
  SAMPAN_CHECK(out.good(), ErrorCode::kIo, "{}: write failed: {}", path, std::strerror(errno));
}

Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SAMPAN_CHECK(in.good(), ErrorCode::kNotFound, "{}: cannot open: {}", path, std::strerror(errno));
  char magic[10];
  in.read(magic, 10);
  SAMPAN_CHECK(in.good() && std::memcmp(magic, "\x93NUMPY", 6) == 0 && magic[6] == 1,
               ErrorCode::kInvalidArgument, "{}: not a version 1 .npy file", path);
  uint16_t len;
  std::memcpy(&len, magic + 8, 2);
  std::string header(len, '\0');
  in.read(header.data(), len);
  SAMPAN_CHECK(in.gcount() == len, ErrorCode::kInvalidArgument, "{}: .npy header is truncated",
               path);
  std::smatch m;
  SAMPAN_CHECK(std::regex_search(header, m, std::regex("'descr': *'([<|]?[a-z][0-9])'")),
               ErrorCode::kInvalidArgument, "{}: .npy header has no descr", path);
  const std::string d = m[1];
  DType dtype;
  if (d == "<f4") dtype = DType::kF32;
  else if (d == "<i4") dtype = DType::kI32;
  else if (d == "<i8") dtype = DType::kI64;
  else if (d == "|u1") dtype = DType::kU8;
  else if (d == "|b1") dtype = DType::kBool;
  else fail(ErrorCode::kUnsupported, "{}: .npy dtype '{}' is not supported (f32, i32, i64, u8, bool)", path, d);
  SAMPAN_CHECK(header.find("'fortran_order': False") != std::string::npos,
               ErrorCode::kUnsupported, "{}: Fortran-order .npy is not supported", path);
  SAMPAN_CHECK(std::regex_search(header, m, std::regex("'shape': *\\(([0-9, ]*)\\)")),
               ErrorCode::kInvalidArgument, "{}: .npy header has no shape", path);
  Shape shape;
  const std::string dims = m[1];
  const std::regex number("[0-9]+");
  std::sregex_iterator it(dims.begin(), dims.end(), number), end;
  // Sizes come from a file anyone may hand us: bound each dimension and the total by what the
  // file can hold before allocating anything.
  in.seekg(0, std::ios::end);
  const int64_t file_bytes = static_cast<int64_t>(in.tellg());
  const int64_t data_bytes = file_bytes - 10 - len;
  int64_t numel = 1, span = 1;  // span: product of the non-zero dimensions (strides use them)
  for (; it != end; ++it) {
    const std::string s = it->str();
    SAMPAN_CHECK(s.size() <= 12, ErrorCode::kInvalidArgument, "{}: .npy dimension {} is too large",
                 path, s);
    const int64_t dim = std::stoll(s);
    SAMPAN_CHECK(dim == 0 || span <= (int64_t{1} << 40) / dim, ErrorCode::kInvalidArgument,
                 "{}: .npy shape holds too many elements", path);
    numel *= dim;
    if (dim > 0) span *= dim;
    shape.push_back(dim);
  }
  SAMPAN_CHECK(shape.size() <= 16, ErrorCode::kInvalidArgument, "{}: .npy has more than 16 dimensions",
               path);
  const int64_t need = dtype_storage_bytes(dtype, numel);
  SAMPAN_CHECK(data_bytes >= need, ErrorCode::kInvalidArgument,
               "{}: .npy data is truncated ({} bytes for shape {}, {} in the file)", path, need,
               shape_str(shape), std::max<int64_t>(data_bytes, 0));
  in.seekg(10 + len, std::ios::beg);
  Tensor t = Tensor::empty(shape, dtype);
  in.read(static_cast<char*>(t.raw()), t.nbytes());
  SAMPAN_CHECK(in.gcount() == t.nbytes(), ErrorCode::kInvalidArgument,
               "{}: .npy data is truncated", path);
  return t;
}

}  // namespace sampan
