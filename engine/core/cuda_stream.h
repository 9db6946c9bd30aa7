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

}  // namespace sampan
