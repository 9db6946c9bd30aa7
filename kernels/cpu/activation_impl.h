// The fused epilogues' activation (binary_cpu.h's Activation) written once over a
// vector-operations struct O (vec_avx2.h's Avx2, vec_avx512.h's Avx512; vec_math_impl.h lists
// what O provides), so that bias_activation_rows on 8 lanes (binary_cpu.cc) and on 16
// (bias_activation_avx512.cc) apply the same operations and give the same bits.
// Include only from files built for O's instruction set.
#pragma once

#include "kernels/cpu/binary_cpu.h"
#include "kernels/cpu/vec_math_impl.h"

namespace sampan::cpu::vec_math {

template <class O>
inline typename O::V activate(typename O::V v, Activation act) {
  switch (act) {
    case Activation::kNone: return v;
    case Activation::kRelu: return O::max(v, O::zero());
    case Activation::kGelu: return gelu<O>(v);
    case Activation::kGeluTanh: return gelu_tanh<O>(v);
  }
  return v;
}

}  // namespace sampan::cpu::vec_math
