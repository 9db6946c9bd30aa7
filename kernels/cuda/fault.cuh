// Reporting bad input that only the device sees (an index a kernel must not follow), without a
// host read-back per kernel: the kernel skips the work and records the fault in two device ints
// its caller owns (engine: the executor's fault word, read once after the run). Host and device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

// Where a kernel records a fault: word[0] = tag of the first fault (the caller's; nonzero),
// word[1] |= the kernel's reason bits. word null: nothing is recorded.
struct FaultSink {
  int32_t* word = nullptr;
  int32_t tag = 0;
};

#ifdef __CUDACC__  // the launchers (host C++) see only FaultSink
__device__ inline void report_fault(const FaultSink& sink, int32_t reason) {
  if (sink.word == nullptr) return;
  atomicCAS(sink.word, 0, sink.tag);
  atomicOr(sink.word + 1, reason);
}
#endif

}  // namespace sampan::cuda
