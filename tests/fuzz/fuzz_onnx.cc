// ONNX model files: the input is a whole .onnx file. Every initializer and every Constant node's
// tensor is turned into a Tensor and read at both ends, so a size the checks let through would
// show under ASan; external data can only name files under the (absent) model directory.
#include "engine/core/error.h"
#include "engine/loaders/onnx_file.h"
#include "proto/formats/onnx.pb.h"
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
  try {
    const sampan::onnx::OnnxFile file = sampan::onnx::parse_onnx(data, size, "fuzz/model.onnx");
    const auto& g = file.model->graph();
    for (const auto& t : g.initializer()) {
      try {
        touch(sampan::onnx::onnx_tensor(file, t, "initializer"));
      } catch (const sampan::Error&) {
      }
    }
    for (const auto& n : g.node()) {
      for (const auto& a : n.attribute()) {
        if (!a.has_t()) continue;
        try {
          touch(sampan::onnx::onnx_tensor(file, a.t(), "attribute"));
        } catch (const sampan::Error&) {
        }
      }
    }
  } catch (const sampan::Error&) {
  }
  return 0;
}
