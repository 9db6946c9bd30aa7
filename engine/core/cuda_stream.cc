// CUDA streams and copies for engine code. Without SAMPAN_WITH_CUDA every entry point answers
// "not compiled with CUDA" so callers build and fail cleanly at run time, as in cuda_allocator.cc.
#include "engine/core/cuda_stream.h"

#include <string>

#include "engine/core/device.h"
#include "engine/core/error.h"

#ifdef SAMPAN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sampan {

#ifdef SAMPAN_WITH_CUDA

void check_cuda(int err, std::string_view what) {
  if (err == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(err);
  cudaGetLastError();  // clear it, so the next unrelated check does not report it again
  fail(e == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kInternal,
       "{}: CUDA error {}: {}", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

void cuda_set_device(int index) {
  const int n = cuda_device_count();
  SAMPAN_CHECK(index >= 0 && index < n, ErrorCode::kNotFound,
               "cuda:{} does not exist ({} CUDA device(s) visible)", index, n);
  check_cuda(cudaSetDevice(index), fmt::format("selecting cuda:{}", index));
}

CudaStream::CudaStream(int device_index) : device_index_(device_index) {
  cuda_set_device(device_index);
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
             fmt::format("creating a stream on cuda:{}", device_index));
  handle_ = s;
}

CudaStream::~CudaStream() {
  if (!handle_) return;
  // Destroying a stream with queued work is legal (the work completes); errors here have no one
  // to report to, and a destructor must not throw.
  cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
  cudaGetLastError();
}

void CudaStream::synchronize(std::string_view what) const {
  cuda_stream_synchronize(handle_, what);
}

void cuda_stream_synchronize(void* stream, std::string_view what) {
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), what);
}

void cuda_copy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
             fmt::format("copying {} bytes", bytes));
}

void cuda_memset_async(void* dst, int value, size_t bytes, void* stream) {
  if (bytes == 0) return;
  check_cuda(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)),
             fmt::format("clearing {} bytes", bytes));
}

void cuda_copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  // cudaMemcpy alone may return before a pageable-host-to-device DMA lands, and kernels on
  // non-blocking streams do not wait for the default stream: synchronise it explicitly.
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, nullptr),
             fmt::format("copying {} bytes", bytes));
  check_cuda(cudaStreamSynchronize(nullptr), fmt::format("copying {} bytes", bytes));
}

int cuda_take_last_error() { return static_cast<int>(cudaGetLastError()); }

void cuda_begin_capture(void* stream) {
  check_cuda(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream),
                                    cudaStreamCaptureModeThreadLocal),
             "beginning a CUDA graph capture");
}

bool cuda_stream_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

void* cuda_end_capture(void* stream, std::string_view what) {
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (end != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    check_cuda(end, what);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  // The executable graph is a copy: the recorded one is not needed once instantiated.
  cudaGraphDestroy(graph);
  check_cuda(inst, what);
  return exec;
}

void cuda_abort_capture(void* stream) noexcept {
  if (!cuda_stream_capturing(stream)) return;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
}

void cuda_graph_launch(void* exec, void* stream, std::string_view what) {
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)),
             what);
}

void cuda_graph_destroy(void* exec) noexcept {
  if (!exec) return;
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
  cudaGetLastError();
}

#else

namespace {
[[noreturn]] void no_cuda(std::string_view what) {
  fail(ErrorCode::kUnsupported, "{}: Sampan was built without CUDA", what);
}
}  // namespace

void check_cuda(int err, std::string_view what) {
  if (err != 0) no_cuda(what);
}

void cuda_set_device(int index) { no_cuda(fmt::format("selecting cuda:{}", index)); }

CudaStream::CudaStream(int device_index) : device_index_(device_index) {
  no_cuda(fmt::format("creating a stream on cuda:{}", device_index));
}

CudaStream::~CudaStream() = default;

void CudaStream::synchronize(std::string_view what) const { no_cuda(what); }

void cuda_stream_synchronize(void*, std::string_view what) { no_cuda(what); }

void cuda_copy_async(void*, const void*, size_t bytes, void*) {
  if (bytes != 0) no_cuda("copying to or from a CUDA device");
}

void cuda_copy(void*, const void*, size_t bytes) {
  if (bytes != 0) no_cuda("copying to or from a CUDA device");
}

void cuda_memset_async(void*, int, size_t bytes, void*) {
  if (bytes != 0) no_cuda("clearing CUDA device memory");
}

int cuda_take_last_error() { return 0; }

void cuda_begin_capture(void*) { no_cuda("beginning a CUDA graph capture"); }
bool cuda_stream_capturing(void*) { return false; }
void* cuda_end_capture(void*, std::string_view what) { no_cuda(what); }
void cuda_abort_capture(void*) noexcept {}
void cuda_graph_launch(void*, void*, std::string_view what) { no_cuda(what); }
void cuda_graph_destroy(void*) noexcept {}

#endif

}  // namespace sampan
