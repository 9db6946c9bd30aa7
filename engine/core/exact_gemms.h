// A device-neutral handle on the CPU GEMM precision (kernels/cpu/gemm_cpu.h, GemmPrecision),
// for code above the kernels floor (the trainer) that must not name a backend's kernels.
#pragma once

#include <memory>

namespace sampan::cpu {
class ScopedGemmPrecision;
}

namespace sampan {

// While it lives, the CPU GEMMs called from the constructing thread keep every product exact
// in f32 (cpu::GemmPrecision::kF32: on AMX CPUs, no bf16 tiles) when `enabled`; otherwise it
// does nothing. Other threads and the CUDA backend are unaffected. Destroy on the constructing
// thread.
class ExactGemmScope {
 public:
  explicit ExactGemmScope(bool enabled);
  ~ExactGemmScope();
  ExactGemmScope(const ExactGemmScope&) = delete;
  ExactGemmScope& operator=(const ExactGemmScope&) = delete;

 private:
  std::unique_ptr<cpu::ScopedGemmPrecision> scope_;
};

}  // namespace sampan
