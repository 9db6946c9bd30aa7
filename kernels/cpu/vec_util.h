// Work splitting shared by the element-wise CPU kernels (rms_norm, rope, silu_mul, embedding,
// attention). Only the dispatching translation units (baseline flags) include this: the
// per-ISA files receive plain ranges and never see std::function.
#pragma once

#include <cstdint>

#include "kernels/cpu/task_runner.h"

namespace sampan::cpu::util {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Calls fn(begin, end) over [0, n) cut into chunks of at least `grain` items. Up to four chunks
// per worker, so that uneven chunks (or a worker busy elsewhere) still balance. Runs inline,
// without the pool's hand-off cost, when one chunk covers everything: decode-sized work is
// usually smaller than a thread wake-up.
template <class Fn>
void parallel_for(TaskRunner& runner, int64_t n, int64_t grain, const Fn& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t n_chunks = ceil_div(n, grain);
  const int64_t most = 4 * static_cast<int64_t>(runner.concurrency());
  if (n_chunks > most) n_chunks = most;
  if (n_chunks <= 1 || runner.concurrency() <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunk = ceil_div(n, n_chunks);
  n_chunks = ceil_div(n, chunk);
  runner.run(n_chunks, [&](int64_t c) {
    const int64_t begin = c * chunk;
    const int64_t end = begin + chunk < n ? begin + chunk : n;
    fn(begin, end);
  });
}

}  // namespace sampan::cpu::util
