// Helpers shared by the CPU kernel tests: run on every instruction set the CPU has, over several
// task runners, and compare floats bit for bit.
#pragma once

#include <bit>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "engine/core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::cpu {

// Puts back the instruction set a test found, whatever set_isa() calls it made.
struct IsaRestore {
  Isa saved = active_isa();
  ~IsaRestore() { set_isa(saved); }
};

inline std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (isa_supported(i)) out.push_back(i);
  }
  return out;
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
