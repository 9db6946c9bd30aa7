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
#include <vector>

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

}  // namespace sampan::server
