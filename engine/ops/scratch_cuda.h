// Device scratch for CUDA launchers (attention's flags and split-K partials, lora's rank-r
// intermediate): one buffer per (device, stream), grown to the largest request seen and reused by
// every node and every step after.
//
// Why one buffer may serve every op: kernels on one stream run in order, so a node's kernels
// have finished with the buffer before the next node's start (a CUDA graph replays them in the
// same order). A launcher must therefore use what it gets only for kernels it queues itself,
// never keep it across nodes. A buffer outgrown is kept, never freed: a CUDA graph recorded
// earlier (graph/executor.h) still writes it on every replay. Doubling bounds what is kept to
// the size of the current buffer; all live until the process ends. While a graph is recorded
// the buffer cannot grow (nothing has run; the executor's first, unrecorded run of the same
// shapes already grew it), so a request for more fails the recording with kUnsupported
// instead, naming `what`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/core/device.h"

namespace sampan::ops {

// Alignment of the buffer and the unit scratch_align_up rounds to.
constexpr size_t kScratchAlign = 256;

constexpr size_t scratch_align_up(size_t n) {
  return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

// The scratch buffer of (device, stream), at least `bytes` long (kScratchAlign-aligned).
// Thread-safe. Throws Error(kUnsupported) naming `what` when it would grow while `capturing`.
uint8_t* stream_scratch(Device device, void* stream, size_t bytes, bool capturing,
                        const char* what);

}  // namespace sampan::ops
