// KServe v2 inference requests for the served LLM, decoded from the REST JSON body or the gRPC
// ModelInferRequest into one struct (one decoder per wire format, one set of rules): inputs
// `text_input` (BYTES [1]) or `input_ids` (INT32/INT64 [n]), optional `max_tokens`, `stream`,
// `sampling_parameters` (a JSON string) and request `parameters` (sampling fields). Every
// refusal is a RequestError naming the input or field in Error::field() (HTTP 400 / gRPC
// INVALID_ARGUMENT).
// A pure function of the request, so it is unit-tested and fuzzed alone
// (tests/fuzz/fuzz_kserve_json.cc).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/tensor.h"

#include "server/model_host.h"
#include "server/request_parse.h"

namespace inference {
class ModelInferRequest;
}

namespace sampan::server {

// What both KServe front ends (REST and gRPC) report: the served model's one version and the
// server's version.
inline constexpr const char* kKserveModelVersion = "1";
inline constexpr const char* kKserveServerVersion = "0.1.0";

struct KserveInferRequest {
  std::string id;
  std::optional<std::string> text;   // text_input
  std::vector<int32_t> ids;          // input_ids (then text is empty)
  SamplingFields fields;
  bool stream = false;               // the `stream` input or parameters.stream
  std::vector<std::string> outputs;  // requested output names; empty: all
};

// POST /v2/models/{m}/infer. Each input's "shape" (when given) must hold non-negative integers
// whose product is the number of elements in "data" (nested or flat).
KserveInferRequest parse_kserve_json(const Json& body);

// inference.GRPCInferenceService ModelInfer / ModelStreamInfer: the same inputs as tensors,
// with typed contents or raw_input_contents (little-endian; BYTES elements each a 4-byte length
// then the bytes), `stream` honoured (ModelStreamInfer streams, ModelInfer refuses it).
KserveInferRequest parse_kserve_proto(const inference::ModelInferRequest& request);

// ---- classic (tensor) models -----------------------------------------------------------------
// A classic model's KServe v2 infer request carries typed tensors. Decoding knows nothing of the
// model: it turns each input into a Tensor of the declared datatype and shape (checking the
// element or byte count against the shape); the tensor session then checks them against the
// model's signature.

// KServe datatype <-> DType: FP32, FP16, BF16, INT64, INT32, INT8, UINT8, BOOL; nullopt / null
// for the others (FP64, UINT16, BYTES, ...).
std::optional<DType> kserve_dtype(std::string_view datatype);
const char* kserve_datatype(DType dtype);

struct KserveTensorInput {
  std::string name;
  std::string datatype;
  Tensor value;  // contiguous, CPU, of kserve_dtype(datatype)
};

struct KserveTensorRequest {
  std::string id;
  std::vector<KserveTensorInput> inputs;  // in request order, names distinct
  struct Output {
    std::string name;
    bool binary = false;  // REST: parameters.binary_data (else the request's default)
  };
  std::vector<Output> outputs;  // requested outputs; empty: all
  bool binary_output = false;   // REST: parameters.binary_data_output (every output binary)
};

// REST: `header` is the JSON part of the body; `binary` the bytes after it (the binary tensor
// extension: Inference-Header-Content-Length gives the JSON's length, and each input with
// parameters.binary_data_size takes that many bytes, in input order). Every input needs
// "datatype" and "shape"; JSON "data" may be flat or nested. Refusals are RequestError naming
// the input ("inputs" for the request's structure).
KserveTensorRequest parse_kserve_tensor_json(const Json& header, std::string_view binary);

// gRPC: typed contents (fp32_contents, int64_contents, int_contents for INT32/INT8,
// uint_contents for UINT8, bool_contents) or raw_input_contents (little-endian bytes).
KserveTensorRequest parse_kserve_tensor_proto(const inference::ModelInferRequest& request);

}  // namespace sampan::server
