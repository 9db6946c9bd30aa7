// Paddle inference models: the input is a legacy program (*.pdmodel, a ProgramDesc protobuf) and
// a parameters file (*.pdiparams): a little-endian uint32 length, that many bytes of program, the
// rest params (a shorter input is all params, read against a fixed list). The program's
// persistable variables are read from the params bytes; every tensor returned is read at both
// ends, so a size the checks let through would show under ASan.
#include <cstring>

#include "engine/core/error.h"
#include "engine/loaders/paddle_file.h"
#include "proto/formats/paddle_framework.pb.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void touch(const sampan::Tensor& t) {
  volatile uint8_t sink = 0;
  const size_t n = static_cast<size_t>(t.nbytes());
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  if (n) sink = sink ^ bytes[0] ^ bytes[n - 1];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace pd = sampan::paddle;
  std::string program, params;
  uint32_t n = 0;
  if (size >= 4) std::memcpy(&n, data, 4);
  if (size >= 4 && n <= size - 4) {
    program.assign(reinterpret_cast<const char*>(data) + 4, n);
    params.assign(reinterpret_cast<const char*>(data) + 4 + n, size - 4 - n);
  } else {
    params.assign(reinterpret_cast<const char*>(data), size);
  }
  std::vector<pd::ParamSpec> specs;
  try {
    if (!program.empty()) {
      auto prog = pd::parse_pdmodel(program, "fuzz/model.pdmodel");
      specs = pd::pdmodel_params(*prog, "fuzz/model.pdmodel");
    } else {
      specs = {{"a", {}, sampan::DType::kF32}, {"b", {-1, 4}, sampan::DType::kF32}, {"c", {}, sampan::DType::kI64}};
    }
  } catch (const sampan::Error&) {
    return 0;
  }
  try {
    for (const auto& [name, t] : pd::parse_pdiparams(params, "fuzz/model.pdiparams", specs)) touch(t);
  } catch (const sampan::Error&) {
  }
  return 0;
}
