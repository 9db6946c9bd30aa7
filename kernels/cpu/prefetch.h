// Software prefetch that the compiler keeps. GCC 12 deletes a loop whose body is only
// _mm_prefetch (or __builtin_prefetch) when its trip count is not a compile-time constant:
// prefetches have no side effects it must keep, so the loop is dead code. That silently removed
// the INT4 decode kernels' prefetch of the scales (found in stop 42: the loop measured no faster
// than none) and an attention loop's prefetch of the next key block. A volatile asm
// statement is never deleted; it reads nothing (prefetches do not fault, so any address will
// do, including one past an array's end: pass it as an integer so that no out-of-range pointer
// is formed).
#pragma once

#include <cstdint>

namespace sampan::cpu {

// The cache line holding address a, into every level (prefetcht0) or into L2 and below
// (prefetcht1).
inline void prefetch_t0(uintptr_t a) {
  asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(a)));
}
inline void prefetch_t1(uintptr_t a) {
  asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(a)));
}

// Prefetches a block of rows into L2 a slice at a time, spread over the calls of a compute loop:
// the panel drivers pack their next weight chunk from rows that are 0.4-4 KiB apart, too many
// short runs for the hardware prefetchers, so without this each packing waits on DRAM while
// the tiles of the previous chunk ran with the memory bus idle. The lines of row r are those
// holding `bytes` bytes from row r's start (below); rows whose address is 0 are skipped.
class RowsPrefetch {
 public:
  // Rows given by address: row r's bytes [offset, offset + bytes) from rows[r] (the array must
  // outlive the prefetching).
  void start(const void* const* rows, int64_t offset, int64_t n_rows, int64_t bytes,
             int64_t steps) {
    start_impl(rows, 0, 0, offset, n_rows, bytes, steps);
  }
  // Rows ld bytes apart from base.
  void start_strided(const void* base, int64_t ld, int64_t n_rows, int64_t bytes,
                     int64_t steps) {
    start_impl(nullptr, reinterpret_cast<uintptr_t>(base), ld, 0, n_rows, bytes, steps);
  }
  void stop() { left_ = 0; }
  // The next slice: about (lines in all) / steps of them.
  void step() {
    for (int64_t n = per_step_ < left_ ? per_step_ : left_; n > 0; --n, --left_) {
      const uintptr_t a = row_ + static_cast<uintptr_t>(line_) * 64;
      if (row_start_ != 0 && a < row_start_ + bytes_) prefetch_t1(a);
      if (++line_ == lines_) next_row();
    }
  }

 private:
  void start_impl(const void* const* rows, uintptr_t base, int64_t ld, int64_t offset,
                  int64_t n_rows, int64_t bytes, int64_t steps) {
    rows_ = rows;
    base_ = base;
    ld_ = ld;
    offset_ = static_cast<uintptr_t>(offset);
    bytes_ = static_cast<uintptr_t>(bytes > 0 ? bytes : 0);
    lines_ = bytes <= 0 ? 0 : bytes / 64 + 2;  // a misaligned run touches up to two more
    n_rows_ = n_rows;
    left_ = n_rows * lines_;
    per_step_ = steps > 0 ? (left_ + steps - 1) / steps : left_;
    r_ = -1;
    next_row();
  }
  void next_row() {
    ++r_;
    line_ = 0;
    if (r_ >= n_rows_) return;  // done: left_ is 0
    if (rows_ == nullptr) {
      row_start_ = base_ + r_ * ld_;
    } else {
      row_start_ = rows_[r_] ? reinterpret_cast<uintptr_t>(rows_[r_]) + offset_ : 0;
    }
    row_ = row_start_ & ~uintptr_t{63};
  }
  const void* const* rows_ = nullptr;
  uintptr_t base_ = 0, offset_ = 0, bytes_ = 0, row_start_ = 0, row_ = 0;
  int64_t ld_ = 0, n_rows_ = 0, lines_ = 0, left_ = 0, per_step_ = 0, r_ = 0, line_ = 0;
};

}  // namespace sampan::cpu
