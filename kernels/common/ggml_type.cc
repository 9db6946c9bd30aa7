// Names of the GGUF tensor types (ggml_type.h), as llama.cpp prints them.
#include "kernels/common/ggml_type.h"

namespace sampan {

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ5_0: return "Q5_0";
    case GgmlType::kQ5_1: return "Q5_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ8_1: return "Q8_1";
    case GgmlType::kQ2_K: return "Q2_K";
    case GgmlType::kQ3_K: return "Q3_K";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
    case GgmlType::kQ8_K: return "Q8_K";
    case GgmlType::kIQ2_XXS: return "IQ2_XXS";
    case GgmlType::kIQ2_XS: return "IQ2_XS";
    case GgmlType::kIQ3_XXS: return "IQ3_XXS";
    case GgmlType::kIQ1_S: return "IQ1_S";
    case GgmlType::kIQ4_NL: return "IQ4_NL";
    case GgmlType::kIQ3_S: return "IQ3_S";
    case GgmlType::kIQ2_S: return "IQ2_S";
    case GgmlType::kIQ4_XS: return "IQ4_XS";
    case GgmlType::kI8: return "I8";
    case GgmlType::kI16: return "I16";
    case GgmlType::kI32: return "I32";
    case GgmlType::kI64: return "I64";
    case GgmlType::kF64: return "F64";
    case GgmlType::kIQ1_M: return "IQ1_M";
    case GgmlType::kBF16: return "BF16";
    case GgmlType::kTQ1_0: return "TQ1_0";
    case GgmlType::kTQ2_0: return "TQ2_0";
    case GgmlType::kMXFP4: return "MXFP4";
  }
  return nullptr;
}

}  // namespace sampan
