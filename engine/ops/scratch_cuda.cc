#include "engine/ops/scratch_cuda.h"

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace sampan::ops {

uint8_t* stream_scratch(Device device, void* stream, size_t bytes, bool capturing,
                        const char* what) {
  static std::mutex mu;
  // Never destroyed: freeing device memory after the CUDA runtime shut down at exit would fail.
  static auto* cache = new std::map<std::pair<int, void*>, std::vector<std::shared_ptr<Storage>>>();
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::shared_ptr<Storage>>& bufs = (*cache)[{device.index, stream}];
  if (bufs.empty() || bufs.back()->bytes() < bytes) {
    SAMPAN_CHECK(!capturing, ErrorCode::kUnsupported,
                 "{}: the scratch buffer would grow to {} bytes while a CUDA graph is recorded",
                 what, bytes);
    size_t grown = 64 * 1024;
    while (grown < bytes) grown *= 2;
    bufs.push_back(Storage::allocate(grown, device));  // the outgrown ones stay (see the header)
  }
  return static_cast<uint8_t*>(bufs.back()->data());
}

}  // namespace sampan::ops
