// Scoped MXCSR denormal modes (FTZ, bit 15: denormal results flushed to zero; DAZ, bit 6:
// denormal inputs read as zero) for the calling thread. MXCSR is per thread, so code on a
// thread pool sets it inside each task. Reading MXCSR costs a few cycles; it is written only
// when it differs from what the scope wants.
#pragma once

#include <immintrin.h>

namespace sampan::cpu {

// kFlush: sets FTZ and DAZ for its lifetime (paged attention: denormal softmax weights cost an
// Intel core a microcode assist each, and flushed they are below 2^-126 of the largest weight);
// otherwise clears them (the AVX2 and AVX512-VNNI fp8 kernels read E4M3 subnormals as f32
// denormals).
template <bool kFlush>
class ScopedDenormalMode {
 public:
  ScopedDenormalMode() : saved_(_mm_getcsr()) {
    if (changes()) _mm_setcsr(kFlush ? saved_ | kFlags : saved_ & ~kFlags);
  }
  ~ScopedDenormalMode() {
    if (changes()) _mm_setcsr(saved_);
  }
  ScopedDenormalMode(const ScopedDenormalMode&) = delete;
  ScopedDenormalMode& operator=(const ScopedDenormalMode&) = delete;

 private:
  static constexpr unsigned kFlags = 0x8040;  // FTZ (bit 15), DAZ (bit 6)
  bool changes() const { return kFlush ? (saved_ & kFlags) != kFlags : (saved_ & kFlags) != 0; }
  unsigned saved_;
};

using DenormalsKept = ScopedDenormalMode<false>;
using DenormalsFlushed = ScopedDenormalMode<true>;

}  // namespace sampan::cpu
