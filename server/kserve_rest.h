// KServe v2 REST (the Open Inference Protocol over HTTP) for the served LLM, following Triton's
// vLLM-backend tensor convention (see grpc_server.h): GET /v2, /v2/health/live,
// /v2/health/ready, /v2/models/{m}[/versions/{v}], .../ready, and POST .../infer with inputs
// text_input (BYTES) or input_ids (INT32), optional max_tokens (INT32), sampling_parameters
// (BYTES, a JSON object) and the sampling fields in the request's "parameters" object. Outputs
// text_output (BYTES [1]) and output_ids (INT32 [n]). Errors are {"error": "message"} naming
// the field or tensor, as the protocol specifies.
// For a classic model (ModelHost::tensor_session()) the model's own tensors are served instead:
// metadata lists the signature's inputs and outputs (datatype, shape with -1 for a symbolic
// dimension), and infer takes typed tensors as JSON "data" (flat or nested) or as binary data
// (Triton's binary tensor extension: Inference-Header-Content-Length, per input
// parameters.binary_data_size), answering with JSON "data" or, when asked
// (parameters.binary_data_output, outputs[].parameters.binary_data), binary outputs after the
// JSON header.
#pragma once

#include <memory>

#include "server/http_types.h"
#include "server/model_host.h"
#include "server/serve_metrics.h"

namespace sampan::server {

// Serves every path under /v2 (and /v2 itself); answers 404 for unknown paths and models and
// 405 for a known path with the wrong method.
void handle_kserve(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                   ModelHost& host, ServeMetrics& metrics);

// {"error": message}, the protocol's error body.
std::string kserve_error_json(const std::string& message);

}  // namespace sampan::server
