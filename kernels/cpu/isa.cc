#include "kernels/cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace sampan::cpu {
namespace {

// Linux requires a process to ask for the AMX tile data state before using it.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  if (!osxsave) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;
  if (!os_avx) {
    f.fma = f.f16c = false;
    return f;
  }
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = b & (1u << 5);
  if (os_avx512) {
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512_fp16 = d & (1u << 23);
  }
  f.amx_bf16 = d & (1u << 22);
  f.amx_tile = d & (1u << 24);
  f.amx_int8 = d & (1u << 25);
  unsigned a1, b1, c1, d1;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  if (os_avx512) f.avx512_bf16 = a1 & (1u << 5);
  if (f.amx_tile) {
    f.amx_os_enabled = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }
  return f;
}

bool supported(const CpuFeatures& f, Isa isa) {
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
                      f.avx512_bf16 && f.avx512_fp16;
  switch (isa) {
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512: return avx512;
    case Isa::kAmx: return avx512 && f.amx_tile && f.amx_bf16 && f.amx_os_enabled;
  }
  return false;
}

Isa best_isa() {
  const CpuFeatures& f = cpu_features();
  Isa best = Isa::kAvx2;
  if (supported(f, Isa::kAvx512)) best = Isa::kAvx512;
  if (supported(f, Isa::kAmx)) best = Isa::kAmx;
  if (const char* env = std::getenv("SAMPAN_CPU_ISA")) {
    Isa want = best;
    if (std::strcmp(env, "avx2") == 0) want = Isa::kAvx2;
    if (std::strcmp(env, "avx512") == 0) want = Isa::kAvx512;
    if (std::strcmp(env, "amx") == 0) want = Isa::kAmx;
    if (static_cast<int>(want) < static_cast<int>(best)) best = want;
  }
  return best;
}

std::atomic<int>& isa_slot() {
  static std::atomic<int> slot{static_cast<int>(best_isa())};
  return slot;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool isa_supported(Isa isa) { return supported(cpu_features(), isa); }

Isa active_isa() { return static_cast<Isa>(isa_slot().load(std::memory_order_relaxed)); }

bool set_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  isa_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

}  // namespace sampan::cpu
