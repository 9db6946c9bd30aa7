// ONNX model files (.onnx): the ModelProto parsed with Sampan's own schema
// (proto/formats/onnx.proto), and its tensors (initializers, Constant values) as Tensors.
//
// What a caller may rely on:
//  - Every error is one line Error naming the file (and the tensor or node where there is one):
//    a file that is not a ModelProto, a file over protobuf's 2 GiB message limit, an unknown
//    data type, data shorter than the dims declare, external data outside the model's directory
//    or past the end of its file. Nothing is read past a buffer's end.
//  - Tensor data stays where it is when it can: raw_data is viewed in the parsed message (kept
//    alive by the returned tensors), external data is mapped read-only. Typed fields
//    (float_data, int64_data, ...) and the float types Sampan computes in f32 (FLOAT16, BFLOAT16,
//    DOUBLE) are copied and converted to f32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/tensor.h"

namespace sampan::onnx_format {
class ModelProto;
class TensorProto;
}  // namespace sampan::onnx_format

namespace sampan::onnx {

struct OnnxFile {
  std::string path;       // as given
  std::string directory;  // where external data files are looked up
  std::shared_ptr<const onnx_format::ModelProto> model;
  int64_t opset = 0;  // version of the default ("" / "ai.onnx") operator set
};

// Reads and parses `path`; checks the IR version, the default opset (7..kMaxOpset) and that no
// model-local functions or other operator domains are used.
OnnxFile read_onnx(const std::string& path);
// The same checks on bytes already in memory (`path` names them in messages and locates
// external data); the fuzz target's entry point.
OnnxFile parse_onnx(const void* data, size_t size, const std::string& path);

constexpr int64_t kMinOpset = 7;
constexpr int64_t kMaxOpset = 21;

// The DType Sampan keeps an ONNX data type in (FLOAT16/BFLOAT16/DOUBLE become f32); throws
// Error(kUnsupported) naming `what` for a type Sampan cannot hold (STRING, complex, ...).
DType onnx_dtype(int32_t data_type, const std::string& what);
// "FLOAT", "INT64", ... for messages.
const char* onnx_dtype_name(int32_t data_type);

// A TensorProto (an initializer or a Constant's value) as a CPU tensor. `what` names it in
// errors ("initializer 'fc.weight'", "node 'Constant_3'").
Tensor onnx_tensor(const OnnxFile& file, const onnx_format::TensorProto& t, const std::string& what);

}  // namespace sampan::onnx
