// Helpers shared by the CPU kernel tests: run on every instruction set the CPU has, over several
// task runners, and compare floats bit for bit.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "engine/core/thread_pool.h"
#include "kernels/common/gemm_weights.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// Puts back the instruction set a test found, whatever set_isa() calls it made.
struct IsaRestore {
  Isa saved = active_isa();
  ~IsaRestore() { set_isa(saved); }
};

// The levels SAMPAN_TEST_ISA selects, or nullopt when unset (then: every level). CTest runs each
// kernel binary with avx2 and once more per entry level in tests/CMakeLists.txt (avx512, amx),
// which reports Skipped where the CPU lacks the level (tests/main.cc): a path the machine
// cannot run shows in CTest's count as skipped, never as passed. An entry also covers the
// levels that only add dot-product extensions to it, up to the next entry level: avx2 covers
// avx2_vnni; avx512 covers avx512_vnni and avx512_bf16. Any other level name selects itself.
inline std::optional<std::vector<Isa>> isas_selected_by_env() {
  const char* v = std::getenv("SAMPAN_TEST_ISA");
  if (!v || !*v) return std::nullopt;
  const std::optional<Isa> first = isa_from_name(v);
  if (!first) return std::vector<Isa>{};
  auto covers = [](Isa entry) -> std::vector<Isa> {
    switch (entry) {
      case Isa::kAvx2: return {Isa::kAvx2, Isa::kAvx2Vnni};
      case Isa::kAvx512: return {Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16};
      case Isa::kAvx2Vnni:
      case Isa::kAvx512Vnni:
      case Isa::kAvx512Bf16:
      case Isa::kAmx: return {entry};
    }
    return {entry};
  };
  return covers(*first);
}

// Says once per binary which selected levels this CPU lacks, so a path that did not run shows
// in the log (the level's own CTest entry, where there is one, reports Skipped).
inline void note_skipped_isas(const std::vector<Isa>& wanted) {
  static bool noted = false;
  if (noted) return;
  noted = true;
  for (Isa i : wanted) {
    if (!isa_supported(i)) {
      std::printf("SKIPPED level %s: this CPU lacks it\n", std::string(isa_name(i)).c_str());
    }
  }
}

// The instruction sets to test: every one the CPU has, or only SAMPAN_TEST_ISA's.
inline std::vector<Isa> supported_isas() {
  const std::optional<std::vector<Isa>> only = isas_selected_by_env();
  const std::vector<Isa> wanted =
      only ? *only : std::vector<Isa>(kAllIsas.begin(), kAllIsas.end());
  note_skipped_isas(wanted);
  std::vector<Isa> out;
  for (Isa i : wanted) {
    if (isa_supported(i)) out.push_back(i);
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
  CHECK(isa_supported(isa));  // so that the case asserts something whichever branch it takes
  const std::optional<std::vector<Isa>> only = isas_selected_by_env();
  return !only || std::find(only->begin(), only->end(), isa) != only->end();
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

// The GEMM tests' verdict on one call's output y [m, ldy]: every column j < n_out within its
// allowed error of the exact result, and y's padding (columns n_out .. ldy) still `sentinel`.
// dot: [m, n_total] exact dot products (plus bias); allowed_at(i * n_total + c): the allowed error
// of dot[i, c]. With silu the output is silu(g) u, g = dot[i, j], u = dot[i, n_out + j], allowed
// 1.1 |u| eg + |silu(g)| eu + 1e-6 |y| (eg, eu the two products' allowed errors, first order).
// Reports the worst error / allowed ratio and where it is.
template <class Allowed>
void check_gemm_output(const std::vector<float>& y, int64_t m, int64_t ldy, int64_t n_out,
                       int64_t n_total, bool silu, const std::vector<double>& dot,
                       Allowed&& allowed_at, float sentinel) {
  double worst = 0.0;
  int64_t wi = 0, wj = 0;
  bool padding_ok = true;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = n_out; j < ldy; ++j) padding_ok &= y[i * ldy + j] == sentinel;
    for (int64_t j = 0; j < n_out; ++j) {
      double want, allowed;
      if (silu) {
        const double g = dot[i * n_total + j], u = dot[i * n_total + n_out + j];
        const double sg = g / (1.0 + std::exp(-g));
        want = sg * u;
        const double eg = allowed_at(i * n_total + j), eu = allowed_at(i * n_total + n_out + j);
        allowed = 1.1 * eg * (std::fabs(u) + eu) + std::fabs(sg) * eu + 1e-6 * std::fabs(want);
      } else {
        want = dot[i * n_total + j];
        allowed = allowed_at(i * n_total + j);
      }
      const double got = y[i * ldy + j];
      const double ratio = std::isfinite(got) ? std::fabs(got - want) / (allowed + 1e-30)
                                              : std::numeric_limits<double>::infinity();
      if (!(ratio <= worst)) {
        worst = ratio;
        wi = i;
        wj = j;
      }
    }
  }
  INFO("worst at row " << wi << " col " << wj << ": error/allowed = " << worst);
  CHECK(padding_ok);
  CHECK(worst <= 1.0);
}

// The weight blocks the quantized prefill cases cycle through (shape 0..2) for a Case with
// rows, bias and ep: one block of 45 rows (a unit of 32 columns and a short one), three blocks
// of 33, 7 and 64 rows (units past a block's end), a SiLU-mul pair of 33.
template <class C>
void set_prefill_blocks(C& c, int shape, uint32_t seed) {
  if (shape == 0) {
    c.rows = {45};
    c.bias = {true};
  } else if (shape == 1) {
    c.rows = {33, 7, 64};
    c.bias = {false, true, false};
  } else {
    c.rows = {33, 33};
    c.bias = {true, seed % 2 == 0};
    c.ep = GemmEpilogue::kSiluMul;
  }
}

inline float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
inline uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

}  // namespace sampan::cpu
