// MappedFile: a whole file mapped read-only into memory (RAII).
//
// Model weights are read in place from the page cache: nothing is copied, pages load on first
// touch and the kernel may drop them under memory pressure. The mapping is PROT_READ, so writing
// through data() faults; callers hand out read-only views only. The file must not be truncated
// while it is mapped (the kernel answers reads past the new end with SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace sampan {

class Tensor;

class MappedFile {
 public:
  // Maps `path`. Throws Error(kNotFound) when it does not exist and Error(kIo) when it cannot be
  // opened, is not a regular file or cannot be mapped; the message names the path and the OS
  // error. An empty file maps to data() == nullptr, size() == 0.
  static std::shared_ptr<const MappedFile> open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }  // [size] bytes
  size_t size() const { return size_; }
  // True when [p, p + bytes) lies entirely inside the mapping.
  bool contains(const void* p, size_t bytes = 0) const;
  // Asks the kernel to start reading [offset, offset + bytes) ahead of use (MADV_WILLNEED);
  // a hint only: failures are ignored.
  void prefetch(size_t offset, size_t bytes) const;
  // Drops the whole pages inside [p, p + bytes) of a file mapping from this process
  // (MADV_DONTNEED): they leave its resident set, and a later read faults them in again from
  // the file (the page cache). For bytes already copied elsewhere. p must lie in a MappedFile's
  // mapping (a private read-only one: nothing of the process's own is lost).
  static void release(const void* p, size_t bytes);
  // The same for a tensor's bytes where it is a contiguous view of a file mapping
  // (Storage::file_mapped); nothing for any other tensor.
  static void release(const Tensor& t);

 private:
  MappedFile() = default;

  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sampan
