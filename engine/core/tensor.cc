#include "engine/core/tensor.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "kernels/common/half.h"
#include "quant/fp8.h"

namespace sampan {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  Allocator& alloc = allocator_for(device);
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = alloc.allocate(bytes);
  s->bytes_ = bytes;
  s->device_ = device;
  s->allocator_ = &alloc;
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t bytes, Device device,
                                       std::shared_ptr<const void> keepalive) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->bytes_ = bytes;
  s->device_ = device;
  s->keepalive_ = std::move(keepalive);
  return s;
}

std::shared_ptr<Storage> Storage::wrap_read_only(const void* data, size_t bytes, Device device,
                                                 std::shared_ptr<const void> keepalive) {
  std::shared_ptr<Storage> s = wrap(const_cast<void*>(data), bytes, device, std::move(keepalive));
  s->read_only_ = true;
  return s;
}

std::shared_ptr<Storage> Storage::wrap_mapped(const void* data, size_t bytes,
                                              std::shared_ptr<const void> keepalive) {
  std::shared_ptr<Storage> s = wrap_read_only(data, bytes, Device::cpu(), std::move(keepalive));
  s->file_mapped_ = true;
  return s;
}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, bytes_);
}

static void check_shape(const Shape& shape) {
  for (int64_t d : shape) {
    SAMPAN_CHECK(d >= 0, ErrorCode::kInvalidArgument, "negative dimension in shape {}",
                 shape_str(shape));
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  const int64_t bytes = dtype_storage_bytes(dtype, shape_numel(shape));
  return from_storage(Storage::allocate(static_cast<size_t>(bytes), device), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  const size_t bytes = static_cast<size_t>(t.nbytes());
  if (bytes == 0) return t;
  switch (device.type) {
    case DeviceType::kCPU: std::memset(t.raw(), 0, bytes); break;
    case DeviceType::kCUDA: {
      // Copied from a zeroed host chunk rather than memset on the device: core stays free of
      // CUDA headers (cuda_stream.h is the only door), and this runs once per KV pool at load.
      constexpr size_t kChunk = size_t{16} << 20;
      const std::vector<char> zero(std::min(bytes, kChunk), 0);
      char* dst = static_cast<char*>(t.raw());
      for (size_t done = 0; done < bytes; done += zero.size()) {
        cuda_copy(dst + done, zero.data(), std::min(zero.size(), bytes - done));
      }
      break;
    }
  }
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, size_t byte_offset,
                            const Shape& shape, DType dtype) {
  check_shape(shape);
  const int64_t bytes = dtype_storage_bytes(dtype, shape_numel(shape));
  SAMPAN_CHECK(storage != nullptr || bytes == 0, ErrorCode::kInternal, "tensor without storage");
  if (storage) {
    SAMPAN_CHECK(byte_offset + static_cast<size_t>(bytes) <= storage->bytes(),
                 ErrorCode::kInternal, "tensor {} {} at byte {} overruns storage of {} bytes",
                 dtype_name(dtype), shape_str(shape), byte_offset, storage->bytes());
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.byte_offset_ = byte_offset;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_f32(const Shape& shape, const std::vector<float>& values) {
  SAMPAN_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()),
               ErrorCode::kInvalidArgument, "{} values for shape {}", values.size(),
               shape_str(shape));
  Tensor t = empty(shape, DType::kF32);
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_i32(const Shape& shape, const std::vector<int32_t>& values) {
  SAMPAN_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()),
               ErrorCode::kInvalidArgument, "{} values for shape {}", values.size(),
               shape_str(shape));
  Tensor t = empty(shape, DType::kI32);
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

int64_t Tensor::dim(int i) const {
  const int r = rank();
  if (i < 0) i += r;
  SAMPAN_CHECK(i >= 0 && i < r, ErrorCode::kInvalidArgument, "dimension {} out of range for {}",
               i, str());
  return shape_[i];
}

int64_t Tensor::stride(int i) const {
  const int r = rank();
  if (i < 0) i += r;
  SAMPAN_CHECK(i >= 0 && i < r, ErrorCode::kInvalidArgument, "dimension {} out of range for {}",
               i, str());
  return strides_[i];
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != s) return false;
    s *= shape_[i];
  }
  return true;
}

void* Tensor::raw() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + byte_offset_;
}

Tensor Tensor::reshape(const Shape& shape) const {
  SAMPAN_CHECK(is_contiguous(), ErrorCode::kInvalidArgument, "reshape of non-contiguous {}",
               str());
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      SAMPAN_CHECK(infer < 0, ErrorCode::kInvalidArgument, "reshape {} has two -1 dims",
                   shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    SAMPAN_CHECK(known > 0 && numel() % known == 0, ErrorCode::kInvalidArgument,
                 "cannot reshape {} to {}", str(), shape_str(shape));
    s[infer] = numel() / known;
  }
  SAMPAN_CHECK(shape_numel(s) == numel(), ErrorCode::kInvalidArgument, "cannot reshape {} to {}",
               str(), shape_str(shape));
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int d, int64_t begin, int64_t end) const {
  const int r = rank();
  if (d < 0) d += r;
  SAMPAN_CHECK(d >= 0 && d < r, ErrorCode::kInvalidArgument, "slice dim {} out of range for {}",
               d, str());
  SAMPAN_CHECK(0 <= begin && begin <= end && end <= shape_[d], ErrorCode::kInvalidArgument,
               "slice [{}, {}) out of range for dim {} of {}", begin, end, d, str());
  SAMPAN_CHECK(dtype_ != DType::kI4 || d == 0, ErrorCode::kUnsupported,
               "packed i4 tensors slice along dim 0 only");
  Tensor t = *this;
  t.byte_offset_ += static_cast<size_t>(dtype_storage_bytes(dtype_, begin * strides_[d]));
  t.shape_[d] = end - begin;
  return t;
}

Tensor Tensor::select(int64_t index) const {
  SAMPAN_CHECK(rank() >= 1, ErrorCode::kInvalidArgument, "select on a scalar");
  Tensor t = slice(0, index, index + 1);
  t.shape_.erase(t.shape_.begin());
  t.strides_.erase(t.strides_.begin());
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return contiguous_copy();
}

Tensor Tensor::contiguous_copy() const {
  SAMPAN_CHECK(device().type == DeviceType::kCPU, ErrorCode::kUnsupported,
               "copy of a {} tensor is not supported yet", device().str());
  Tensor out = empty(shape_, dtype_);
  if (numel() == 0) return out;
  if (is_contiguous()) {
    std::memcpy(out.raw(), raw(), static_cast<size_t>(nbytes()));
    return out;
  }
  SAMPAN_CHECK(dtype_ != DType::kI4, ErrorCode::kUnsupported, "strided copy of packed i4");
  const int64_t esize = dtype_bits(dtype_) / 8;
  const char* src = static_cast<const char*>(raw());
  char* dst = static_cast<char*>(out.raw());
  std::vector<int64_t> idx(shape_.size(), 0);
  for (int64_t n = 0; n < numel(); ++n) {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * strides_[i];
    std::memcpy(dst + n * esize, src + off * esize, static_cast<size_t>(esize));
    for (size_t i = idx.size(); i-- > 0;) {
      if (++idx[i] < shape_[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  if (device().type == DeviceType::kCPU && target.type == DeviceType::kCPU) return contiguous_copy();
  Tensor src = *this;
  if (!is_contiguous()) {
    SAMPAN_CHECK(device().type == DeviceType::kCPU, ErrorCode::kUnsupported,
                 "copy of the strided {} tensor {} to {} is not supported yet", device().str(),
                 str(), target.str());
    src = contiguous_copy();
  }
  Tensor out = empty(shape_, dtype_, target);
  cuda_copy(out.raw(), src.raw(), static_cast<size_t>(nbytes()));
  return out;
}

Tensor Tensor::to_f32() const {
  Tensor src = contiguous();
  if (dtype_ == DType::kF32) return src.clone();
  Tensor out = empty(shape_, DType::kF32);
  float* y = out.data<float>();
  const int64_t n = numel();
  switch (dtype_) {
    case DType::kF32: break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(src.data<uint16_t>()[i]);
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(src.data<uint16_t>()[i]);
      break;
    case DType::kF8E4M3:
      for (int64_t i = 0; i < n; ++i) y[i] = quant::fp8_e4m3_to_f32(src.data<uint8_t>()[i]);
      break;
    case DType::kI8:
      for (int64_t i = 0; i < n; ++i) y[i] = src.data<int8_t>()[i];
      break;
    case DType::kI4:
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t b = src.data<uint8_t>()[i / 2];
        const int v = (i % 2 == 0) ? (b & 0xf) : (b >> 4);
        y[i] = static_cast<float>(v >= 8 ? v - 16 : v);
      }
      break;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(src.data<int32_t>()[i]);
      break;
    case DType::kI64:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(src.data<int64_t>()[i]);
      break;
    case DType::kU8:
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(src.data<uint8_t>()[i]);
      break;
  }
  return out;
}

std::string Tensor::str() const { return std::string(dtype_name(dtype_)) + shape_str(shape_); }

Tensor allocate_named(const Shape& shape, DType dtype, Device device, std::string_view what,
                      Fill fill) {
  try {
    switch (fill) {
      case Fill::kUninitialized: return Tensor::empty(shape, dtype, device);
      case Fill::kZero: return Tensor::zeros(shape, dtype, device);
    }
    fail(ErrorCode::kInternal, "unknown fill");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kOutOfMemory) throw;
    fail(ErrorCode::kOutOfMemory, "{} {}{} ({} bytes on {}): {}", what, dtype_name(dtype),
         shape_str(shape), dtype_storage_bytes(dtype, shape_numel(shape)), device.str(),
         e.what());
  }
}

}  // namespace sampan
