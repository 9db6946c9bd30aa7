// Run-time instruction-set dispatch for CPU kernels. The baseline is AVX2+FMA+F16C; files named
// *_avx512.cc and *_amx.cc are compiled for those sets and only called when the active level
// includes them.
//
// A level is a set of CPU features, not a CPU family: AMD Zen 4 and Intel Ice Lake run the
// AVX-512 kernels although they lack AVX512-FP16 (no kernel needs it). Kernels ask
// isa_at_least() or one of the has_*() predicates, never compare levels with == / < themselves.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace sampan::cpu {

// In the order run-time selection prefers them: the CPU's level is the last one it supports.
// Every level includes the features of every lower one except kAvx2Vnni's: AVX-VNNI (the VEX
// form of vpdpbusd) is missing on Ice Lake and Zen 4, which have AVX-512 and AVX512-VNNI, so the
// AVX-512 levels do not require it and do not offer it.
enum class Isa {
  kAvx2,        // AVX2 + FMA + F16C (Haswell, Zen 1 and later)
  kAvx2Vnni,    // kAvx2 + AVX-VNNI (Alder Lake, Sierra Forest: AVX-512-less CPUs with int8
                // dots; gemm_prefill_int_avx2.cc's VEX VNNI tiles)
  kAvx512,      // kAvx2 + AVX-512 F/BW/VL/DQ (Skylake-SP)
  kAvx512Vnni,  // kAvx512 + AVX512-VNNI (Cascade Lake, Ice Lake)
  kAvx512Bf16,  // kAvx512Vnni + AVX512-BF16 (Cooper Lake, Zen 4; no BF16 CPU lacks VNNI)
  kAmx,         // kAvx512Bf16 + AMX-TILE/BF16/INT8 granted by the OS (Sapphire Rapids)
};

inline constexpr std::array<Isa, 6> kAllIsas = {Isa::kAvx2,       Isa::kAvx2Vnni,
                                                Isa::kAvx512,     Isa::kAvx512Vnni,
                                                Isa::kAvx512Bf16, Isa::kAmx};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx_vnni = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;  // reported only: no level requires it
  // vpermb / vpermi2b: no level requires it; a kernel that uses it asks (every AMX CPU has it).
  bool avx512_vbmi = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  bool amx_os_enabled = false;  // the kernel granted this process the AMX tile state
  // A tuning hint, not a feature (no level depends on it): the CPU executes 512-bit operations
  // as two 256-bit halves (AMD family 19h, Zen 4), so a kernel gains nothing from zmm over ymm
  // there and may lose (kernels/cpu/gemm_quant_cpu.cc says where it is used).
  bool zmm_split = false;
  // A tuning hint: the CPU issues vdpbf16ps at half the rate of vfmadd231ps, so a bf16 dot
  // product multiplies no faster than f32 FMAs on the same data (Intel cores: an Emerald Rapids
  // core, asm loops of 12 and 24 independent chains, issued vdpbf16ps zmm once per 2 cycles and
  // vfmadd231ps twice per cycle: 85 against 170 GFLOP/s). Not on AMD Zen 4 (1.9x the f32 panels).
  bool dpbf16_half_rate = false;
  // A tuning hint: an FMA with a denormal f32 operand takes a microcode assist (Intel cores: 46x
  // slower per vector on Emerald Rapids), so kernels that may meet denormals take them apart.
  // AMD Zen cores multiply them at full speed (Zen 3, 2-core EPYC VM, 8 independent FMA chains:
  // 0.254 s with denormal multiplicands against 0.285 s with normal ones; denormal results no
  // slower either), and there kernels multiply them as they come.
  bool denormal_assist = true;
};

// What this CPU (and the OS's saved register state) offers.
const CpuFeatures& cpu_features();

// The level kernels dispatch on: the best one the CPU supports, lowered by the environment
// variable SAMPAN_CPU_ISA=<isa_name> (see isa_for_request; an unknown name prints one warning
// line to stderr and is ignored). Tests use set_isa to cover every path on one machine.
Isa active_isa();
// Makes `isa` the active level; returns false (and changes nothing) when the CPU lacks it.
bool set_isa(Isa isa);
bool isa_supported(Isa isa);
bool isa_supported_by(const CpuFeatures& f, Isa isa);
// The best level the CPU supports, whatever SAMPAN_CPU_ISA says.
Isa best_supported_isa();

// "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx".
std::string_view isa_name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);

// Whether level `a` has every feature level `b` requires (so code compiled for `b` may run
// at `a`). Reflexive; not a total order: kAvx2Vnni and kAvx512 do not include each other.
bool isa_includes(Isa a, Isa b);
// isa_includes(active_isa(), isa): the question a kernel asks before taking a path.
bool isa_at_least(Isa isa);

// What SAMPAN_CPU_ISA=`request` selects on a CPU with features `f`: the last level in kAllIsas,
// up to `request`, that `f` supports. So it lowers and never raises: avx2_vnni on Zen 4 gives
// avx2, amx there gives avx512_bf16, avx512 on Alder Lake gives avx2_vnni. nullopt when
// `request` names no level.
std::optional<Isa> isa_for_request(std::string_view request, const CpuFeatures& f);

// Feature questions about the active level (false when the CPU has the feature but the level
// was lowered below it).
inline bool has_avx512() { return isa_at_least(Isa::kAvx512); }
// VEX-encoded vpdpbusd on 256-bit registers (AVX-VNNI).
inline bool has_avx_vnni() { return isa_at_least(Isa::kAvx2Vnni); }
// EVEX-encoded vpdpbusd/vpdpwssd, on 512-bit and (with VL) 256-bit registers.
inline bool has_avx512_vnni() { return isa_at_least(Isa::kAvx512Vnni); }
// VEX vpdpbusd / vpdpwssd for the AVX2 kernels: the avx2_vnni level, or an AVX512-VNNI level on
// a CPU that has AVX-VNNI too (Sapphire, Emerald, Granite Rapids; not Ice Lake or Zen 4), where
// some formats still decode on AVX2 kernels (GGUF Q6_K). Never at the plain avx512 level.
inline bool has_vex_vnni() {
  return has_avx_vnni() || (has_avx512_vnni() && cpu_features().avx_vnni);
}
// vdpbf16ps and the f32 -> bf16 conversions vcvtne(2)ps2bf16.
inline bool has_avx512_bf16() { return isa_at_least(Isa::kAvx512Bf16); }
inline bool has_amx() { return isa_at_least(Isa::kAmx); }

}  // namespace sampan::cpu
