// CUDA streams, copies and error checks for engine code, without CUDA headers: handles are
// void* (a cudaStream_t underneath) so that headers such as executor.h and op_registry.h compile
// in every build. Without SAMPAN_WITH_CUDA every entry point throws Error(kUnsupported) (the
// error checks accept success and throw otherwise), like cuda_allocator.cc.
#pragma once

#include <cstddef>
#include <string_view>

namespace sampan {

// A non-blocking stream on one device: it never synchronises with the legacy default stream,
// so work from several executors on one GPU can overlap. Owned: destroyed with the object.
class CudaStream {
 public:
  // Throws Error(kNotFound) when cuda:<device_index> does not exist, kUnsupported without CUDA.
  explicit CudaStream(int device_index);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  void* handle() const { return handle_; }  // cudaStream_t
  int device_index() const { return device_index_; }

  // Waits for all queued work. A CUDA error (a fault in any kernel queued since the last
  // synchronisation, or a failed copy) throws Error naming `what` (see check_cuda).
  void synchronize(std::string_view what) const;

 private:
  void* handle_ = nullptr;
  int device_index_ = 0;
};

// Makes cuda:<index> current on the calling thread (launches and allocations go there).
void cuda_set_device(int index);

// Queues a copy of `bytes` between any mix of host and device memory on `stream` (null: the
// legacy default stream); unified addressing picks the direction. A pageable host source may be
// reused as soon as this returns; a host destination holds the data only after the stream has
// been synchronised.
void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream);

// Queues setting `bytes` of device memory at `dst` to the byte `value` on `stream`.
void cuda_memset_async(void* dst, int value, size_t bytes, void* stream);

// Waits for the work queued on `stream` (a cudaStream_t), reporting a CUDA error like
// CudaStream::synchronize. For kernel launchers that need a result on the host.
void cuda_stream_synchronize(void* stream, std::string_view what);

// Copies `bytes` like cuda_copy_async on the legacy default stream and waits for it: the data is
// in place on return and both buffers may be reused.
void cuda_copy(void* dst, const void* src, size_t bytes);

// Returns and clears the calling thread's last CUDA error (a cudaError_t; 0 when none). A launch
// with a bad configuration is reported here, without waiting for the GPU.
int cuda_take_last_error();

// Throws when `err` (a cudaError_t) is not cudaSuccess: Error(kOutOfMemory) for an allocation
// failure, Error(kInternal) otherwise, "<what>: CUDA error <name>: <description>". The thread's
// last-error slot is cleared so a recoverable error does not resurface in the next check (a
// sticky error, such as an illegal address, leaves the context unusable: CUDA's rule, not ours).
void check_cuda(int err, std::string_view what);

// CUDA graphs: the launches queued on one stream, recorded once and replayed with one call (a
// decode step of a 32-layer model is ~300 launches; replaying saves their CPU cost and the gaps
// between them). Handles are void* (a cudaGraphExec_t underneath).
//
// Starts recording what the calling thread queues on `stream` instead of running it. Thread-local
// mode: other threads' CUDA calls are unaffected, but this thread must not synchronise, copy to
// pageable memory or cudaMalloc until the capture ends (a kernel launcher that would checks
// cuda_stream_capturing first).
void cuda_begin_capture(void* stream);
// True while `stream` is being captured.
bool cuda_stream_capturing(void* stream);
// Ends the capture and instantiates it. Throws Error naming `what` when the capture was
// invalidated (an illegal call during capture) or instantiation failed; the stream has left
// capture mode either way.
void* cuda_end_capture(void* stream, std::string_view what);
// Ends a capture after an error without instantiating anything; never throws, clears the error.
void cuda_abort_capture(void* stream) noexcept;
// Queues one replay of `exec` on `stream`.
void cuda_graph_launch(void* exec, void* stream, std::string_view what);
void cuda_graph_destroy(void* exec) noexcept;

}  // namespace sampan
