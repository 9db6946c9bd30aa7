// Tensor: a typed, shaped view of device memory.
//
// Row-major everywhere: dimension 0 is outermost, strides are in elements. A tensor shares its
// Storage; views (slice, reshape) share it too and never copy. Storage either owns memory from
// a device allocator or wraps memory owned by someone else (an mmapped model file), which it
// keeps alive through a shared handle. Packed kI4 tensors must be contiguous with an even
// innermost dimension.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"

namespace sampan {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);

class Storage {
 public:
  // Owns `bytes` from the device's allocator.
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device);
  // Views external memory; `keepalive` holds whatever owns it (e.g. a mapped file).
  static std::shared_ptr<Storage> wrap(void* data, size_t bytes, Device device,
                                       std::shared_ptr<const void> keepalive);
  // Views memory that must never be written (a read-only file mapping). Ops that write into
  // an input in place check read_only() and refuse with an error instead of faulting.
  static std::shared_ptr<Storage> wrap_read_only(const void* data, size_t bytes, Device device,
                                                 std::shared_ptr<const void> keepalive);
  // A read-only view of a file mapping (MappedFile) that `keepalive` holds: as wrap_read_only,
  // and file_mapped() says that its pages may be dropped and read again from the file
  // (MappedFile::release) once the bytes are copied elsewhere.
  static std::shared_ptr<Storage> wrap_mapped(const void* data, size_t bytes,
                                              std::shared_ptr<const void> keepalive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool read_only() const { return read_only_; }
  bool file_mapped() const { return file_mapped_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null when wrapping external memory
  bool read_only_ = false;
  bool file_mapped_ = false;
  std::shared_ptr<const void> keepalive_;
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Zero bytes on any device; a CUDA fill is complete on return.
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A contiguous tensor over `storage` starting `byte_offset` bytes in.
  static Tensor from_storage(std::shared_ptr<Storage> storage, size_t byte_offset,
                             const Shape& shape, DType dtype);
  // A contiguous f32 / i32 CPU tensor holding a copy of `values`.
  static Tensor from_f32(const Shape& shape, const std::vector<float>& values);
  static Tensor from_i32(const Shape& shape, const std::vector<int32_t>& values);

  bool defined() const { return storage_ != nullptr || numel() == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t stride(int i) const;
  int64_t numel() const { return shape_numel(shape_); }
  // Bytes spanned by the elements when contiguous.
  int64_t nbytes() const { return dtype_storage_bytes(dtype_, numel()); }
  bool is_contiguous() const;
  // True when every row (last dimension) is contiguous; rows may be spaced apart.
  bool rows_contiguous() const { return shape_.empty() || stride(-1) == 1; }

  void* raw() const;
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t byte_offset() const { return byte_offset_; }

  // Views (no copy).
  Tensor reshape(const Shape& shape) const;            // contiguous tensors only; one dim may be -1
  Tensor slice(int dim, int64_t begin, int64_t end) const;  // [begin, end) along dim
  Tensor select(int64_t index) const;                  // drops dimension 0

  // Copies.
  Tensor contiguous() const;
  Tensor to_f32() const;  // any float dtype (and i32/i64/i8) to a contiguous f32 CPU tensor
  Tensor clone() const { return contiguous_copy(); }
  // A contiguous copy on `target` (host <-> device, or within one device); never aliases this
  // tensor. Copies that touch a CUDA device are complete on return. Strided device tensors are
  // not supported yet (kUnsupported); strided host tensors are packed on the host first.
  Tensor to(Device target) const;

  std::string str() const;  // "bf16[32000, 2048]"

 private:
  Tensor contiguous_copy() const;

  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
};

enum class Fill { kUninitialized, kZero };

// Tensor::empty / Tensor::zeros, except that running out of memory throws Error(kOutOfMemory)
// whose one line names `what` (e.g. "KV cache pool k_cache.3"), the shape and the bytes: what
// an operator needs to pick a smaller --max-context or kv_cache_bytes.
Tensor allocate_named(const Shape& shape, DType dtype, Device device, std::string_view what,
                      Fill fill);

// What a tensor views: tensors with equal keys read the same bytes the same way (tied weights,
// the embedding table reused as the LM head). For maps that keep one copy per distinct view.
using TensorViewKey = std::tuple<const Storage*, size_t, Shape, Shape, DType>;
inline TensorViewKey view_key(const Tensor& t) {
  return {t.storage().get(), t.byte_offset(), t.shape(), t.strides(), t.dtype()};
}

}  // namespace sampan
