#include "engine/core/exact_gemms.h"

#include "kernels/cpu/gemm_cpu.h"

namespace sampan {

ExactGemmScope::ExactGemmScope(bool enabled) {
  if (enabled) scope_ = std::make_unique<cpu::ScopedGemmPrecision>(cpu::GemmPrecision::kF32);
}

ExactGemmScope::~ExactGemmScope() = default;

}  // namespace sampan
