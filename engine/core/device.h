// Devices and their allocators. The CPU is always present; CUDA is compiled in when the build
// has it and answers "not compiled with CUDA" otherwise, so every caller builds either way.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace sampan {

enum class DeviceType { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory aligned to at least 64 bytes, or throws Error(kOutOfMemory) naming the size.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// The process-wide allocator of a device. Throws Error(kUnsupported) for CUDA when this build
// has no CUDA backend, and Error(kNotFound) when the device index does not exist.
Allocator& allocator_for(Device device);

bool cuda_compiled();
int cuda_device_count();  // 0 when not compiled or no GPU/driver is present

// The instruction set the CPU kernels run with ("avx2", "avx512", "amx"): what this CPU has,
// lowered by SAMPAN_CPU_ISA. For reports; front-ends need not know the kernels.
std::string cpu_isa();

// Whether the CPU allocator puts buffers of 2 MiB or more on transparent huge pages (on unless
// SAMPAN_HUGE_PAGES=0; see device.cc), and with it whether Model::upload_constants copies
// file-mapped weights into such buffers on the CPU.
bool cpu_huge_pages();
// Buffers from this size on start on 2 MiB pages.
constexpr size_t kCpuHugePageBytes = size_t(2) << 20;

}  // namespace sampan
