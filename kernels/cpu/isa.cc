#include "kernels/cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

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

// The vendor string of CPUID leaf 0 ("GenuineIntel", "AuthenticAMD"): EBX, EDX, ECX in order.
bool cpu_vendor_is(std::string_view vendor) {
  unsigned a, regs[3];
  if (!__get_cpuid(0, &a, &regs[0], &regs[2], &regs[1])) return false;
  char name[12];
  std::memcpy(name, regs, sizeof(name));
  return std::string_view(name, sizeof(name)) == vendor;
}

// AMD family 19h (Zen 3, Zen 4: only Zen 4 has AVX-512) splits 512-bit operations in two.
bool splits_zmm() {
  unsigned a, b, c, d;
  if (!cpu_vendor_is("AuthenticAMD") || !__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned family = ((a >> 8) & 0xf) + (((a >> 8) & 0xf) == 0xf ? (a >> 20) & 0xff : 0);
  return family == 0x19;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  f.zmm_split = splits_zmm();
  f.dpbf16_half_rate = cpu_vendor_is("GenuineIntel");
  f.denormal_assist = !cpu_vendor_is("AuthenticAMD");
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  if (!osxsave) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;          // xmm, ymm
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;     // plus opmask, zmm0-15 upper, zmm16-31
  const bool os_amx = ((xcr0 >> 17) & 3) == 3;       // tile config, tile data
  if (!os_avx) {
    f.fma = f.f16c = false;
    return f;
  }
  // Leaf 7 answers with the highest leaf's data on CPUs that lack it, so ask first.
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_subleaf = a;
  f.avx2 = b & (1u << 5);
  if (os_avx512) {
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512_vnni = c & (1u << 11);
    f.avx512_vbmi = c & (1u << 1);
    f.avx512_fp16 = d & (1u << 23);
  }
  if (os_amx) {
    f.amx_bf16 = d & (1u << 22);
    f.amx_tile = d & (1u << 24);
    f.amx_int8 = d & (1u << 25);
  }
  if (max_subleaf >= 1) {
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avx_vnni = a1 & (1u << 4);
    if (os_avx512) f.avx512_bf16 = a1 & (1u << 5);
  }
  if (f.amx_tile) {
    f.amx_os_enabled = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }
  return f;
}

// Each level's features as bits, so that "includes" is a subset test.
enum Feature : unsigned {
  kFAvx2 = 1u << 0,  // with FMA and F16C
  kFAvxVnni = 1u << 1,
  kFAvx512 = 1u << 2,  // F, BW, VL, DQ
  kFAvx512Vnni = 1u << 3,
  kFAvx512Bf16 = 1u << 4,
  kFAmx = 1u << 5,  // tile, BF16, INT8, granted by the OS
};

unsigned level_features(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return kFAvx2;
    case Isa::kAvx2Vnni: return kFAvx2 | kFAvxVnni;
    case Isa::kAvx512: return kFAvx2 | kFAvx512;
    case Isa::kAvx512Vnni: return kFAvx2 | kFAvx512 | kFAvx512Vnni;
    case Isa::kAvx512Bf16: return kFAvx2 | kFAvx512 | kFAvx512Vnni | kFAvx512Bf16;
    case Isa::kAmx: return kFAvx2 | kFAvx512 | kFAvx512Vnni | kFAvx512Bf16 | kFAmx;
  }
  return ~0u;  // unreachable: no CPU supports every bit
}

unsigned cpu_feature_bits(const CpuFeatures& f) {
  unsigned bits = 0;
  if (!(f.avx2 && f.fma && f.f16c)) return bits;
  bits |= kFAvx2;
  if (f.avx_vnni) bits |= kFAvxVnni;
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) bits |= kFAvx512;
  if (f.avx512_vnni) bits |= kFAvx512Vnni;
  if (f.avx512_bf16) bits |= kFAvx512Bf16;
  if (f.amx_tile && f.amx_bf16 && f.amx_int8 && f.amx_os_enabled) bits |= kFAmx;
  return bits;
}

// The last level in kAllIsas up to `cap` that the CPU supports; avx2 when none (the baseline
// the binary was built for, so there is nothing lower to fall to).
Isa best_up_to(const CpuFeatures& f, Isa cap) {
  Isa best = Isa::kAvx2;
  for (Isa isa : kAllIsas) {
    if (static_cast<int>(isa) <= static_cast<int>(cap) && isa_supported_by(f, isa)) best = isa;
  }
  return best;
}

Isa initial_isa() {
  const CpuFeatures& f = cpu_features();
  const char* env = std::getenv("SAMPAN_CPU_ISA");
  if (!env || !*env) return best_supported_isa();
  if (const std::optional<Isa> isa = isa_for_request(env, f)) return *isa;
  std::string names;
  for (Isa isa : kAllIsas) names += std::string(names.empty() ? "" : "|") += isa_name(isa);
  std::fprintf(stderr, "warning: SAMPAN_CPU_ISA=%s is not one of %s; using %s\n", env,
               names.c_str(), std::string(isa_name(best_supported_isa())).c_str());
  return best_supported_isa();
}

std::atomic<int>& isa_slot() {
  static std::atomic<int> slot{static_cast<int>(initial_isa())};
  return slot;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool isa_supported_by(const CpuFeatures& f, Isa isa) {
  return (level_features(isa) & ~cpu_feature_bits(f)) == 0;
}

bool isa_supported(Isa isa) { return isa_supported_by(cpu_features(), isa); }

Isa best_supported_isa() { return best_up_to(cpu_features(), kAllIsas.back()); }

Isa active_isa() { return static_cast<Isa>(isa_slot().load(std::memory_order_relaxed)); }

bool set_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  isa_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

bool isa_includes(Isa a, Isa b) { return (level_features(b) & ~level_features(a)) == 0; }

bool isa_at_least(Isa isa) { return isa_includes(active_isa(), isa); }

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx2Vnni: return "avx2_vnni";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512_vnni";
    case Isa::kAvx512Bf16: return "avx512_bf16";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : kAllIsas) {
    if (isa_name(isa) == name) return isa;
  }
  return std::nullopt;
}

std::optional<Isa> isa_for_request(std::string_view request, const CpuFeatures& f) {
  const std::optional<Isa> want = isa_from_name(request);
  if (!want) return std::nullopt;
  return best_up_to(f, *want);
}

}  // namespace sampan::cpu
