#include "engine/core/device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "engine/core/error.h"
#include "kernels/cpu/isa.h"

namespace sampan {

std::string cpu_isa() { return std::string(cpu::isa_name(cpu::active_isa())); }

bool cpu_huge_pages() {
  static const bool on = [] {
    const char* e = std::getenv("SAMPAN_HUGE_PAGES");
    return !(e != nullptr && std::strcmp(e, "0") == 0);
  }();
  return on;
}

std::string Device::str() const {
  return type == DeviceType::kCPU ? std::string("cpu") : fmt::format("cuda:{}", index);
}

namespace {

// Allocations from this size on (quantized weights, KV cache pages, large activations) start on
// a 2 MiB boundary and ask for transparent huge pages (madvise, before any page is touched), so
// that streaming them is not also a stream of 4 KiB page walks and hardware-prefetch restarts at
// every 4 KiB boundary. Measured on a Sapphire Rapids VM with THP "madvise", quantized on load
// (TinyLlama shape, `sampan bench`, 2 alternating rounds): decode 1.25-1.28x (int4 g128) and
// 1.25-1.29x (fp8) at 1 thread, 1.18-1.19x and 1.33-1.35x at 2, at the amx and avx2 levels
// alike. SAMPAN_HUGE_PAGES=0 keeps 4 KiB pages (to compare); where the kernel has THP off the
// advice is a no-op.
// An allocation is rounded up to whole 2 MiB pages where that adds at most an eighth to it (a
// 5.5 MiB FFN matrix of int4 weights takes 6 MiB, all of it on huge pages); otherwise only the
// whole pages inside it are advised and its tail stays on 4 KiB pages.
constexpr size_t kHugePage = kCpuHugePageBytes;

size_t huge_rounded(size_t bytes) {
  const size_t up = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  return up - bytes <= bytes / 8 ? up : bytes / kHugePage * kHugePage;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    // 64-byte alignment (one cache line, one AVX-512 register), or 2 MiB from kHugePage on.
    const bool huge = bytes >= kHugePage && cpu_huge_pages();
    const size_t advised = huge ? huge_rounded(bytes) : 0;
    const size_t rounded = std::max(advised, (bytes + 63) & ~size_t{63});
    // posix_memalign: aligned_alloc wants the size to be a multiple of the alignment.
    void* p = nullptr;
    if (::posix_memalign(&p, huge ? kHugePage : 64, rounded) != 0) p = nullptr;
    if (!p) fail(ErrorCode::kOutOfMemory, "cpu: cannot allocate {} bytes", bytes);
    // Advice only: where it fails (THP off, an old kernel) nothing changes.
    if (huge) ::madvise(p, advised, MADV_HUGEPAGE);
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
  Device device() const override { return Device::cpu(); }
};

}  // namespace

// Defined in cuda_allocator.cc (real with SAMPAN_WITH_CUDA, a stub otherwise).
Allocator& cuda_allocator(int index);

Allocator& allocator_for(Device device) {
  switch (device.type) {
    case DeviceType::kCPU: {
      static CpuAllocator cpu;
      return cpu;
    }
    case DeviceType::kCUDA: return cuda_allocator(device.index);
  }
  fail(ErrorCode::kInternal, "unknown device type");
}

}  // namespace sampan
