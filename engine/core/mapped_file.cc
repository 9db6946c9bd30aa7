#include "engine/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace sampan {

namespace {

// Closes the descriptor on every exit path; the mapping stays valid after close.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "{}: cannot open: {}", path,
         std::strerror(err));
  }
  FdCloser closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    fail(ErrorCode::kIo, "{}: cannot stat: {}", path, std::strerror(errno));
  }
  // A directory opens fine with O_RDONLY but cannot be mapped; say what is wrong instead of
  // reporting mmap's EINVAL/ENODEV.
  SAMPAN_CHECK(S_ISREG(st.st_mode), ErrorCode::kIo, "{}: not a regular file", path);

  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ == 0) return file;  // mmap rejects length 0

  void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    fail(ErrorCode::kIo, "{}: cannot map {} bytes: {}", path, file->size_, std::strerror(errno));
  }
  file->data_ = static_cast<uint8_t*>(p);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

bool MappedFile::contains(const void* p, size_t bytes) const {
  if (data_ == nullptr) return false;
  const auto begin = reinterpret_cast<uintptr_t>(data_);
  const auto q = reinterpret_cast<uintptr_t>(p);
  return q >= begin && q - begin <= size_ && bytes <= size_ - (q - begin);
}

void MappedFile::release(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (a + page - 1) / page * page, end = (a + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedFile::release(const Tensor& t) {
  if (t.storage() && t.storage()->file_mapped() && t.is_contiguous()) {
    release(t.raw(), static_cast<size_t>(t.nbytes()));
  }
}

void MappedFile::prefetch(size_t offset, size_t bytes) const {
  if (data_ == nullptr || offset >= size_) return;
  if (bytes > size_ - offset) bytes = size_ - offset;
  // madvise needs a page-aligned start.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t aligned = offset - offset % page;
  ::madvise(data_ + aligned, bytes + (offset - aligned), MADV_WILLNEED);
}

}  // namespace sampan
