// CPU instruction-set levels (kernels/cpu/isa.h): their order and inclusion, what real CPUs'
// feature sets select, lowering with SAMPAN_CPU_ISA and set_isa, and that what this machine
// reports agrees with the kernel's own account in /proc/cpuinfo.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"

using namespace sampan::cpu;

namespace {

// Feature sets of real CPUs (from their vendors' lists), to check the levels they get without
// owning one of each.
CpuFeatures haswell() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  return f;
}
CpuFeatures alder_lake() {  // AVX-VNNI, no AVX-512
  CpuFeatures f = haswell();
  f.avx_vnni = true;
  return f;
}
CpuFeatures skylake_sp() {
  CpuFeatures f = haswell();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  return f;
}
CpuFeatures ice_lake() {  // AVX512-VNNI, no BF16
  CpuFeatures f = skylake_sp();
  f.avx512_vnni = true;
  return f;
}
CpuFeatures zen4() {  // BF16 and VNNI, no AVX-VNNI, no FP16, no AMX
  CpuFeatures f = ice_lake();
  f.avx512_bf16 = true;
  return f;
}
CpuFeatures sapphire_rapids() {
  CpuFeatures f = zen4();
  f.avx_vnni = f.avx512_fp16 = true;
  f.amx_tile = f.amx_bf16 = f.amx_int8 = f.amx_os_enabled = true;
  return f;
}

// The level a CPU gets by default: a request for the top level caps nothing.
Isa best_for(const CpuFeatures& f) { return *isa_for_request("amx", f); }

int rank(Isa isa) { return static_cast<int>(isa); }

// Puts back the level a test found.
struct IsaRestore {
  Isa saved = active_isa();
  ~IsaRestore() { set_isa(saved); }
};

// The flags line of /proc/cpuinfo, as a set; empty where it cannot be read.
std::set<std::string> proc_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> out;
    for (std::string w; words >> w;) out.insert(w);
    return out;
  }
  return {};
}

// Runs this test binary's hidden probe case with SAMPAN_CPU_ISA=`value` and returns what it
// printed (stdout and stderr): the level is chosen once per process, so only a fresh process
// shows what the environment variable does.
std::string run_probe(const std::string& value) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  self[n] = '\0';
  const std::string cmd = "SAMPAN_CPU_ISA='" + value + "' '" + self + "' '[.isa_probe]' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[512];
  while (size_t got = std::fread(buf, 1, sizeof buf, p)) out.append(buf, got);
  CHECK(pclose(p) == 0);
  return out;
}

std::optional<std::string> probed_level(const std::string& out) {
  const size_t at = out.find("ACTIVE_ISA=");
  if (at == std::string::npos) return std::nullopt;
  const size_t begin = at + 11;
  return out.substr(begin, out.find('\n', begin) - begin);
}

}  // namespace

TEST_CASE("isa: levels are listed in preference order with distinct names", "[isa]") {
  REQUIRE(kAllIsas.front() == Isa::kAvx2);
  REQUIRE(kAllIsas.back() == Isa::kAmx);
  std::set<std::string_view> names;
  for (size_t i = 0; i < kAllIsas.size(); ++i) {
    const Isa isa = kAllIsas[i];
    INFO(isa_name(isa));
    CHECK(static_cast<size_t>(isa) == i);  // the enum order is the preference order
    CHECK(names.insert(isa_name(isa)).second);
    CHECK(isa_from_name(isa_name(isa)) == isa);
  }
  CHECK(isa_from_name("avx512_fp16") == std::nullopt);
  CHECK(isa_from_name("AVX2") == std::nullopt);
  CHECK(isa_from_name("") == std::nullopt);
}

TEST_CASE("isa: each level includes the ones below it, except AVX-VNNI's", "[isa]") {
  for (Isa a : kAllIsas) {
    INFO(isa_name(a));
    CHECK(isa_includes(a, a));
    CHECK(isa_includes(a, Isa::kAvx2));
    CHECK(isa_includes(Isa::kAmx, a) == (a != Isa::kAvx2Vnni));
  }
  // The AVX-512 levels form a chain.
  const Isa chain[] = {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16, Isa::kAmx};
  for (size_t i = 0; i < std::size(chain); ++i) {
    for (size_t j = 0; j < std::size(chain); ++j) {
      INFO(isa_name(chain[i]) << " vs " << isa_name(chain[j]));
      CHECK(isa_includes(chain[i], chain[j]) == (i >= j));
    }
  }
  // Ice Lake and Zen 4 have AVX-512 without AVX-VNNI, Alder Lake the reverse.
  CHECK_FALSE(isa_includes(Isa::kAvx512, Isa::kAvx2Vnni));
  CHECK_FALSE(isa_includes(Isa::kAvx2Vnni, Isa::kAvx512));
}

TEST_CASE("isa: real CPUs' feature sets select their level", "[isa]") {
  CHECK(best_for(CpuFeatures{}) == Isa::kAvx2);  // below the baseline: nothing lower to use
  CHECK_FALSE(isa_supported_by(CpuFeatures{}, Isa::kAvx2));
  CHECK(best_for(haswell()) == Isa::kAvx2);
  CHECK(best_for(alder_lake()) == Isa::kAvx2Vnni);
  CHECK(best_for(skylake_sp()) == Isa::kAvx512);
  CHECK(best_for(ice_lake()) == Isa::kAvx512Vnni);
  CHECK(best_for(zen4()) == Isa::kAvx512Bf16);  // AVX-512 kernels without AVX512-FP16
  CHECK(best_for(sapphire_rapids()) == Isa::kAmx);

  CpuFeatures no_grant = sapphire_rapids();  // the OS refused the tile state
  no_grant.amx_os_enabled = false;
  CHECK(best_for(no_grant) == Isa::kAvx512Bf16);
  CpuFeatures no_fma = haswell();
  no_fma.fma = false;
  CHECK_FALSE(isa_supported_by(no_fma, Isa::kAvx2));
  CpuFeatures bf16_only = skylake_sp();  // no real CPU: BF16 without VNNI stays at avx512
  bf16_only.avx512_bf16 = true;
  CHECK(best_for(bf16_only) == Isa::kAvx512);
  CpuFeatures no_vl = ice_lake();  // every AVX-512 level needs all of F/BW/VL/DQ
  no_vl.avx512vl = false;
  CHECK(best_for(no_vl) == Isa::kAvx2);
}

TEST_CASE("isa: SAMPAN_CPU_ISA lowers to the best supported level up to it, never raises",
          "[isa]") {
  const CpuFeatures cpus[] = {haswell(), alder_lake(), skylake_sp(), ice_lake(), zen4(),
                              sapphire_rapids()};
  for (const CpuFeatures& f : cpus) {
    const Isa best = best_for(f);
    for (Isa want : kAllIsas) {
      INFO("best " << isa_name(best) << " request " << isa_name(want));
      const std::optional<Isa> got = isa_for_request(isa_name(want), f);
      REQUIRE(got);
      CHECK(isa_supported_by(f, *got));
      CHECK(rank(*got) <= rank(want));
      CHECK(rank(*got) <= rank(best));
      for (Isa between : kAllIsas) {  // the best such level: none between it and the request
        if (rank(between) > rank(*got) && rank(between) <= rank(want)) {
          CHECK_FALSE(isa_supported_by(f, between));
        }
      }
      if (isa_supported_by(f, want)) CHECK(*got == want);
    }
  }
  CHECK(isa_for_request("avx2_vnni", zen4()) == Isa::kAvx2);
  CHECK(isa_for_request("avx512", zen4()) == Isa::kAvx512);
  CHECK(isa_for_request("amx", zen4()) == Isa::kAvx512Bf16);
  CHECK(isa_for_request("avx512_bf16", ice_lake()) == Isa::kAvx512Vnni);
  CHECK(isa_for_request("avx512_bf16", alder_lake()) == Isa::kAvx2Vnni);
  CHECK(isa_for_request("avx2", alder_lake()) == Isa::kAvx2);
  CHECK(isa_for_request("avx2_vnni", sapphire_rapids()) == Isa::kAvx2Vnni);
  CHECK(isa_for_request("avx3", zen4()) == std::nullopt);
  CHECK(isa_for_request("", zen4()) == std::nullopt);
}

TEST_CASE("isa: this CPU's features agree with /proc/cpuinfo", "[isa]") {
  const std::set<std::string> flags = proc_cpu_flags();
  if (flags.empty()) {
    WARN("SKIPPED: /proc/cpuinfo has no flags line here");
    CHECK(isa_supported(Isa::kAvx2) == isa_supported(best_supported_isa()));
    return;
  }
  const CpuFeatures& f = cpu_features();
  auto has = [&](const char* flag) { return flags.count(flag) != 0; };
  // The kernel lists a feature only when the OS also saves its registers, as detect() asks.
  CHECK(f.avx2 == has("avx2"));
  CHECK(f.fma == has("fma"));
  CHECK(f.f16c == has("f16c"));
  CHECK(f.avx_vnni == has("avx_vnni"));
  CHECK(f.avx512f == has("avx512f"));
  CHECK(f.avx512bw == has("avx512bw"));
  CHECK(f.avx512vl == has("avx512vl"));
  CHECK(f.avx512dq == has("avx512dq"));
  CHECK(f.avx512_vnni == has("avx512_vnni"));
  CHECK(f.avx512_bf16 == has("avx512_bf16"));
  CHECK(f.avx512_fp16 == has("avx512_fp16"));
  CHECK(f.amx_tile == has("amx_tile"));
  CHECK(f.amx_bf16 == has("amx_bf16"));
  CHECK(f.amx_int8 == has("amx_int8"));
  for (Isa isa : kAllIsas) {
    if (!isa_supported(isa)) std::printf("SKIPPED level %s: this CPU lacks it\n",
                                         std::string(isa_name(isa)).c_str());
  }
}

TEST_CASE("isa: set_isa moves between supported levels, refuses the others", "[isa]") {
  IsaRestore restore;
  CHECK(isa_supported(best_supported_isa()));
  for (Isa isa : kAllIsas) {
    INFO(isa_name(isa));
    const Isa before = active_isa();
    if (!isa_supported(isa)) {
      CHECK_FALSE(set_isa(isa));
      CHECK(active_isa() == before);
      continue;
    }
    REQUIRE(set_isa(isa));
    CHECK(active_isa() == isa);
    // The predicates follow the active level, not the CPU, and never claim what it lacks.
    const CpuFeatures& f = cpu_features();
    CHECK(has_avx512() == isa_includes(isa, Isa::kAvx512));
    CHECK(has_avx_vnni() == isa_includes(isa, Isa::kAvx2Vnni));
    CHECK(has_avx512_vnni() == isa_includes(isa, Isa::kAvx512Vnni));
    CHECK(has_avx512_bf16() == isa_includes(isa, Isa::kAvx512Bf16));
    CHECK(has_amx() == (isa == Isa::kAmx));
    if (has_avx512()) CHECK((f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq));
    if (has_avx_vnni()) CHECK(f.avx_vnni);
    if (has_avx512_vnni()) CHECK(f.avx512_vnni);
    if (has_avx512_bf16()) CHECK(f.avx512_bf16);
    if (has_amx()) CHECK((f.amx_tile && f.amx_bf16 && f.amx_int8 && f.amx_os_enabled));
    // VEX VNNI for the AVX2 kernels: at avx2_vnni, or at an AVX512-VNNI level where the CPU has
    // AVX-VNNI as well; never at avx2 or plain avx512, never without the CPU feature.
    CHECK(has_vex_vnni() == (isa_includes(isa, Isa::kAvx2Vnni) ||
                             (isa_includes(isa, Isa::kAvx512Vnni) && f.avx_vnni)));
    if (has_vex_vnni()) CHECK(f.avx_vnni);
    if (isa == Isa::kAvx2 || isa == Isa::kAvx512) CHECK_FALSE(has_vex_vnni());
  }
}

TEST_CASE("isa: the process starts at the level SAMPAN_CPU_ISA allows", "[isa]") {
  const Isa best = best_supported_isa();
  for (Isa want : kAllIsas) {
    const std::string out = run_probe(std::string(isa_name(want)));
    INFO("SAMPAN_CPU_ISA=" << isa_name(want) << " printed: " << out);
    const std::optional<Isa> expect = isa_for_request(isa_name(want), cpu_features());
    REQUIRE(expect);
    CHECK(probed_level(out) == std::string(isa_name(*expect)));
    CHECK(rank(*expect) <= rank(best));  // never above the CPU's own level
    CHECK(rank(*expect) <= rank(want));
    CHECK(out.find("warning") == std::string::npos);
  }
  // An unknown name: one warning line, and the CPU's best level.
  const std::string out = run_probe("avx9000");
  INFO("printed: " << out);
  CHECK(probed_level(out) == std::string(isa_name(best)));
  CHECK(out.find("warning: SAMPAN_CPU_ISA=avx9000") != std::string::npos);
  // Empty means unset.
  CHECK(probed_level(run_probe("")) == std::string(isa_name(best)));
}

// Run by the case above in a child process; hidden from ordinary runs.
TEST_CASE("isa: probe", "[.isa_probe]") {
  std::printf("ACTIVE_ISA=%s\n", std::string(isa_name(active_isa())).c_str());
  CHECK(true);
}
