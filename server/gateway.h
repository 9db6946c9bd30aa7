// What every front end (OpenAI HTTP, KServe v2 REST, KServe v2 gRPC, sampan.v1.Generate) does
// the same way between its wire format and the engine, so the fronts differ only in how they
// spell requests and answers:
//   - the status of each error kind, HTTP and gRPC from one table (error_status);
//   - admission: the served model, not draining, loaded (admit), then a prompt that fits and
//     token ids in the vocabulary (engine_request);
//   - the outcome of a finished request (finish_error) and its finish reason's name;
//   - the API-key check (check_api_key).
// Token timing is measured in one place too: ServeMetrics::observe_token (inter-token latency)
// and generation_done (time to first token, from the engine's timings).
// Errors carry the request field at fault in Error::field(); nothing here parses messages.
#pragma once

#include <grpcpp/support/status_code_enum.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/tensor_session.h"
#include "server/chat_prompt.h"
#include "server/kserve_decode.h"
#include "server/model_host.h"
#include "server/request_parse.h"

namespace sampan::server {

// ---- errors ------------------------------------------------------------------------------

struct ErrorStatus {
  int http;
  grpc::StatusCode grpc;
};

// The one table (gateway.cc). Each row is a pair from google.rpc.Code's documented HTTP mapping,
// so an HTTP client and a gRPC client learn the same thing about the same failure.
ErrorStatus error_status(ErrorCode code);
inline int http_status(ErrorCode code) { return error_status(code).http; }
inline grpc::StatusCode grpc_status(ErrorCode code) { return error_status(code).grpc; }

// A missing or wrong API key; not an ErrorCode because the engine never produces it.
inline constexpr ErrorStatus kUnauthenticatedStatus{401, grpc::StatusCode::UNAUTHENTICATED};

// current_error() (the exception being handled as an Error) is in engine/core/error.h.

// OpenAI's error "type" for an HTTP status.
const char* error_type(int status);

// ---- admission ---------------------------------------------------------------------------

// Error(kNotFound, field) unless `model` is the served model's name or one of its LoRA
// adapters' (serve --lora). Returns the adapter index (-1: the base).
int32_t check_model_name(const ModelHost& host, const std::string& model,
                         const std::string& field = "model");

// The engine for a generation request naming `model` (empty: the served one), checked in this
// order: the name (kNotFound naming `model_field`: a wrong name is wrong in every state), not
// draining (kUnavailable), a language model (kInvalidArgument when a classic model is served:
// "model 'x' is a tensor model; use /v2/models/x/infer"), loaded (kUnavailable).
// `lora`, when given, receives the LoRA adapter `model` names (-1: the base, also for an empty
// name); the caller puts it in EngineRequest::lora.
std::shared_ptr<runtime::Engine> admit(const ModelHost& host, const std::string& model,
                                       const std::string& model_field = "model",
                                       int32_t* lora = nullptr);

// The request a front end submits: `prompt` with `fields` applied and max_tokens resolved (the
// request's, else the server's default, capped to what fits after the prompt). Throws
// Error(kInvalidArgument) naming `prompt_field` when the prompt is empty, leaves no room for one
// generated token, or holds an id outside the model's vocabulary; naming "stop_token_ids" for a
// stop id outside it.
runtime::EngineRequest engine_request(const ModelHost& host, const runtime::Engine& engine,
                                      std::string id, std::vector<int32_t> prompt,
                                      const SamplingFields& fields,
                                      const std::string& prompt_field);

// The prompt of a chat conversation rendered by the model's template. The template's refusals
// (raise_exception, an unsupported construct) keep their kind and name `field`; a model without
// a template is kInvalidArgument naming `field`, with `instead` telling the client what to send.
// `options`: chat_prompt.h's (the generation prompt, continue_final_message, extra variables).
std::vector<int32_t> encode_chat(const ModelHost& host, const Json& messages, const Json& tools,
                                 const std::string& field, std::string_view instead,
                                 const cli::ChatOptions& options = {});

// ---- finished requests ---------------------------------------------------------------------

// Who ended a request the engine finished as kCancelled.
enum class CancelCause {
  kServer,    // shutting down, or the server's own limit
  kClient,    // the client went away or cancelled
  kDeadline,  // the client's deadline passed
};

// The finish reason every API reports: "stop", "length", "cancelled", "timeout", "error".
const char* finish_reason(runtime::EngineFinish finish);

// nullopt when the request completed (stop, length); otherwise the Error its front end answers
// with: kDeadlineExceeded (its time limit, or a cancellation at the client's deadline),
// kCancelled (the client), kUnavailable (the server cancelled it while shutting down),
// kInternal (generation failed; the message carries the engine's).
std::optional<Error> finish_error(const runtime::EngineEvent& final_event, CancelCause cause);

// ---- API keys ------------------------------------------------------------------------------

enum class ApiKeyCheck { kOk, kMissing, kNotBearer, kWrongKey };

// `authorization`: the value of the Authorization header (HTTP) or metadata (gRPC), null when
// absent. kOk when `keys` is empty or the value is "Bearer <key>" (scheme case-insensitive, as
// RFC 9110 says) with one of them. Keys are compared in constant time.
ApiKeyCheck check_api_key(const std::vector<std::string>& keys,
                          const std::string_view* authorization);
// The message for a failed check, naming what the client must send.
const char* api_key_message(ApiKeyCheck result);

// ---- KServe admission (REST and gRPC; the decoders are kserve_decode.h) ----------------------

// Error(kNotFound) naming "name" unless `name` is the served model, or naming "version" unless
// `version` is empty or kKserveModelVersion.
void check_kserve_model(const ModelHost& host, const std::string& name,
                        const std::string& version);

// The engine request for `in` (engine_request: the prompt named "text_input" or "input_ids" as
// the request gave it); no logprobs, which KServe responses do not carry.
runtime::EngineRequest kserve_engine_request(const ModelHost& host, const runtime::Engine& engine,
                                             const KserveInferRequest& in, std::string id);

// ---- classic (tensor) models over KServe v2 --------------------------------------------------

// The message every LLM endpoint answers a classic model's server with (400 / INVALID_ARGUMENT).
std::string tensor_model_message(const ModelHost& host);

// The session for a KServe infer request on a classic model, checked as admit() checks: the
// name, not draining, loaded. Null when the served model is a language model (the caller takes
// its LLM path).
std::shared_ptr<runtime::TensorSession> admit_tensor(const ModelHost& host,
                                                     const std::string& model,
                                                     const std::string& model_field);

// The request's inputs keyed by name, each checked to be a model input of the model's datatype
// (kInvalidArgument naming the input); the session then checks presence and shapes.
std::map<std::string, Tensor> kserve_tensor_feeds(const runtime::TensorSession& session,
                                                  KserveTensorRequest& request);

// Indexes into the signature's outputs of the requested outputs (all when none is named), with
// whether each goes out as binary data (REST; gRPC always sends raw contents). An unknown or
// repeated name is kInvalidArgument naming it.
struct TensorOutputChoice {
  size_t index;
  bool binary;
};
std::vector<TensorOutputChoice> kserve_tensor_outputs(const runtime::TensorSession& session,
                                                      const KserveTensorRequest& request);

// A signature tensor's KServe shape: its dimensions, -1 for a symbolic one.
std::vector<int64_t> kserve_shape(const models::TensorSpec& spec);
// Its KServe datatype ("FP32", ...; the dtype's own name when KServe has none).
std::string kserve_spec_datatype(const models::TensorSpec& spec);

}  // namespace sampan::server
