// The Catch main of every unit, kernel and server test binary.
//   - SAMPAN_TEST_ISA=<level> (set by CTest for the per-level kernel entries): a CPU without that
//     instruction set exits 77, which CTest counts as Skipped, never as passed.
//   - Any failure exits 1: Catch returns the number of failed test cases, and that number
//     could be 77, which CTest would read as a skip.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kernels/cpu/isa.h"

int main(int argc, char** argv) {
  using sampan::cpu::Isa;
  if (const char* want = std::getenv("SAMPAN_TEST_ISA"); want && *want) {
    bool known = false;
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
      if (sampan::cpu::isa_name(isa) != want) continue;
      known = true;
      if (!sampan::cpu::isa_supported(isa)) {
        std::printf("SKIPPED: this CPU has no %s\n", want);
        return 77;
      }
    }
    if (!known) {
      std::fprintf(stderr, "error: SAMPAN_TEST_ISA=%s is not avx2, avx512 or amx\n", want);
      return 1;
    }
  }
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::ConfigData& cfg = session.configData();
  const bool listing = cfg.listTests || cfg.listTestNamesOnly || cfg.listTags || cfg.listReporters;
  const int result = session.run();
  // Listing returns how many tests it listed, which test discovery reads; only runs map to 0/1.
  return listing ? result : (result == 0 ? 0 : 1);
}
