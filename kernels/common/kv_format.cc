// Names of the KV-cache formats: option parsing (serve configs, the C API) needs no kernel code.
#include "kernels/common/kv_format.h"

#include <string>

namespace sampan {

const char* kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kF8E4M3: return "fp8";
    case KvDtype::kI8: return "int8";
    case KvDtype::kI4: return "int4";
  }
  return "?";
}

bool parse_kv_dtype(const char* text, KvDtype* out) {
  const std::string t = text ? text : "";
  if (t == "f32" || t == "float32") *out = KvDtype::kF32;
  else if (t == "bf16" || t == "bfloat16") *out = KvDtype::kBF16;
  else if (t == "fp8" || t == "f8_e4m3") *out = KvDtype::kF8E4M3;
  else if (t == "int8" || t == "i8") *out = KvDtype::kI8;
  else if (t == "int4" || t == "i4") *out = KvDtype::kI4;
  else return false;
  return true;
}

}  // namespace sampan
