// Buffers the CPU benchmarks stream weights from.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

// Memory on 2 MiB boundaries, with transparent huge pages asked for (madvise, before the pages
// are first touched) when `huge`: what the engine's own weight allocations do, so that a stream
// of weights is not also a stream of 4 KiB page walks.
template <typename T>
class PageBuffer {
 public:
  void assign(int64_t n, bool huge) {
    constexpr size_t kAlign = size_t(2) << 20;
    const size_t bytes = (static_cast<size_t>(n) * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    data_.reset(static_cast<T*>(std::aligned_alloc(kAlign, bytes)));
    if (huge) ::madvise(data_.get(), bytes, MADV_HUGEPAGE);
    n_ = n;
  }
  T* data() const { return data_.get(); }
  int64_t size() const { return n_; }
  T* begin() const { return data_.get(); }
  T* end() const { return data_.get() + n_; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  int64_t n_ = 0;
};
