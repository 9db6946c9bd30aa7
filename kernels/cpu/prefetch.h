// Software prefetch that the compiler keeps. GCC 12 deletes a loop whose body is only
// _mm_prefetch (or __builtin_prefetch) when its trip count is not a compile-time constant:
// prefetches have no side effects it must keep, so the loop is dead code. That silently removed
// the INT4 decode kernels' prefetch of the scales (found in stop 42: the loop measured no faster
// than none) and the AMX-INT8 attention loop's prefetch of the next key block. A volatile asm
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

}  // namespace sampan::cpu
