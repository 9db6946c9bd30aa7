// Run-time instruction-set dispatch for CPU kernels. The baseline is AVX2+FMA+F16C; files named
// *_avx512.cc and *_amx.cc are compiled for those sets and only called when the CPU has them.
#pragma once

#include <string_view>

namespace sampan::cpu {

enum class Isa {
  kAvx2,    // AVX2 + FMA + F16C (baseline)
  kAvx512,  // AVX-512 F/BW/VL/DQ + BF16 + FP16 conversions
  kAmx,     // kAvx512 plus AMX-BF16 tiles (Sapphire Rapids and later)
};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;
  bool amx_os_enabled = false;  // the kernel granted this process the AMX tile state
};

const CpuFeatures& cpu_features();

// The best instruction set this CPU supports, lowered by the environment variable
// SAMPAN_CPU_ISA=avx2|avx512|amx (never raised above what the CPU has). Tests use set_isa to
// cover every path on one machine.
Isa active_isa();
// Returns false (and changes nothing) when the CPU lacks `isa`.
bool set_isa(Isa isa);
bool isa_supported(Isa isa);
std::string_view isa_name(Isa isa);

}  // namespace sampan::cpu
