// Helpers shared by the CPU kernel tests: run on every instruction set the CPU has, over several
// task runners, and compare floats bit for bit.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <functional>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// Puts back the instruction set a test found, whatever set_isa() calls it made.
struct IsaRestore {
  Isa saved = active_isa();
  ~IsaRestore() { set_isa(saved); }
};

// The instruction set SAMPAN_TEST_ISA selects (avx2|avx512|amx), or nullopt when unset. CTest
// runs each test case with avx2 and every kernel binary once more per higher level, which
// reports Skipped where the CPU lacks the level (tests/main.cc): a path the machine cannot run
// shows in CTest's count as skipped, never as passed.
inline std::optional<Isa> isa_selected_by_env() {
  const char* v = std::getenv("SAMPAN_TEST_ISA");
  if (!v || !*v) return std::nullopt;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (isa_name(i) == v) return i;
  return std::nullopt;
}

// The instruction sets to test: every one the CPU has, or only SAMPAN_TEST_ISA's.
inline std::vector<Isa> supported_isas() {
  const std::optional<Isa> only = isa_selected_by_env();
  std::vector<Isa> out;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (isa_supported(i) && (!only || *only == i)) out.push_back(i);
  }
  return out;
}

// Whether a test written for `isa` alone runs now. When the CPU lacks `isa` it still checks
// that dispatch refuses it (set_isa fails, nothing selects it), so the test case asserts
// something on every machine; the real run is the level's own CTest entry.
inline bool isa_under_test(Isa isa) {
  if (!isa_supported(isa)) {
    const Isa before = active_isa();
    CHECK_FALSE(set_isa(isa));
    CHECK(active_isa() == before);
    CHECK(active_isa() != isa);
    return false;
  }
  const std::optional<Isa> only = isa_selected_by_env();
  CHECK((!only || *only != isa || isa_supported(isa)));
  return !only || *only == isa;
}

// Serial, but reports 8 workers so that the kernels cut the work as on a wide machine (attention,
// for one, then splits long key ranges even for a handful of tokens), deterministically.
class WideSerialRunner final : public TaskRunner {
 public:
  void run(int64_t n, const std::function<void(int64_t)>& fn) override {
    for (int64_t i = n - 1; i >= 0; --i) fn(i);  // reverse order: no reliance on task order
  }
  int concurrency() const override { return 8; }
};

// One runner of each kind: one worker, a real pool, and many reported workers run serially.
struct Runners {
  SerialRunner serial;
  ThreadPool pool{2};
  WideSerialRunner wide;
  std::vector<std::pair<const char*, TaskRunner*>> all() {
    return {{"serial", &serial}, {"pool2", &pool}, {"wide", &wide}};
  }
};

inline float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
inline uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

}  // namespace sampan::cpu
