#include "engine/core/device.h"

#include <cstdlib>
#include <new>

#include "engine/core/error.h"
#include "kernels/cpu/isa.h"

namespace sampan {

std::string cpu_isa() { return std::string(cpu::isa_name(cpu::active_isa())); }

std::string Device::str() const {
  return type == DeviceType::kCPU ? std::string("cpu") : fmt::format("cuda:{}", index);
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    // 64-byte alignment: one cache line, one AVX-512 register; round up as aligned_alloc needs.
    const size_t rounded = (bytes + 63) & ~size_t{63};
    void* p = std::aligned_alloc(64, rounded);
    if (!p) fail(ErrorCode::kOutOfMemory, "cpu: cannot allocate {} bytes", bytes);
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
