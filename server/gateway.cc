#include "server/gateway.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <new>

namespace sampan::server {

ErrorStatus error_status(ErrorCode code) {
  using G = grpc::StatusCode;
  switch (code) {
    case ErrorCode::kInvalidArgument: return {400, G::INVALID_ARGUMENT};
    case ErrorCode::kNotFound: return {404, G::NOT_FOUND};
    // Valid input this build or model cannot handle: the server's gap, not a malformed request,
    // and retrying will not help. google.rpc pairs UNIMPLEMENTED with 501.
    case ErrorCode::kUnsupported: return {501, G::UNIMPLEMENTED};
    // A limit reached now (queue full): the client should back off and retry.
    case ErrorCode::kResourceExhausted: return {429, G::RESOURCE_EXHAUSTED};
    case ErrorCode::kUnavailable: return {503, G::UNAVAILABLE};
    case ErrorCode::kDeadlineExceeded: return {504, G::DEADLINE_EXCEEDED};
    // 499 is nginx's "client closed request", what google.rpc pairs with CANCELLED.
    case ErrorCode::kCancelled: return {499, G::CANCELLED};
    // The server failed at something it should manage. Out of memory included: backing off
    // (what RESOURCE_EXHAUSTED / 429 ask for) is for the admission limits, and an allocation
    // failing mid-generation already reaches clients as a failed generation (500 / INTERNAL).
    case ErrorCode::kOutOfMemory:
    case ErrorCode::kInvalidModel:
    case ErrorCode::kIo:
    case ErrorCode::kInternal: return {500, G::INTERNAL};
  }
  return {500, G::INTERNAL};
}


const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "method_not_allowed";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    case 504: return "timeout";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// ---- admission ---------------------------------------------------------------------------

int32_t check_model_name(const ModelHost& host, const std::string& model,
                         const std::string& field) {
  const std::optional<int32_t> lora = host.lora_index(model);
  if (!lora) {
    std::string served = fmt::format("'{}'", host.name());
    for (const std::string& a : host.adapters()) served += fmt::format(", '{}'", a);
    fail_field(ErrorCode::kNotFound, field, "model '{}' is not served here; this server serves {}",
               model, served);
  }
  return *lora;
}

std::shared_ptr<runtime::Engine> admit(const ModelHost& host, const std::string& model,
                                       const std::string& model_field, int32_t* lora) {
  const int32_t index = model.empty() ? -1 : check_model_name(host, model, model_field);
  if (lora != nullptr) *lora = index;
  SAMPAN_CHECK(!host.draining(), ErrorCode::kUnavailable, "the server is shutting down");
  std::shared_ptr<runtime::Engine> engine = host.engine();
  if (engine == nullptr && host.tensor_session() != nullptr) {
    fail_field(ErrorCode::kInvalidArgument, model_field, "{}", tensor_model_message(host));
  }
  SAMPAN_CHECK(engine != nullptr, ErrorCode::kUnavailable, "model '{}' is still loading",
               host.name());
  return engine;
}

runtime::EngineRequest engine_request(const ModelHost& host, const runtime::Engine& engine,
                                      std::string id, std::vector<int32_t> prompt,
                                      const SamplingFields& fields,
                                      const std::string& prompt_field) {
  const int64_t max_len = engine.max_model_len();
  const int64_t vocab = engine.model_info().vocab_size;
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) {
    fail_field(ErrorCode::kInvalidArgument, prompt_field, "'{}' has no tokens", prompt_field);
  }
  if (n_prompt >= max_len) {
    fail_field(ErrorCode::kInvalidArgument, prompt_field,
               "'{}' has {} tokens; this model's context is {} tokens (the prompt and at least "
               "one generated token must fit)", prompt_field, n_prompt, max_len);
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      fail_field(ErrorCode::kInvalidArgument, prompt_field,
                 "'{}' holds token id {} (at {}), outside the vocabulary [0, {})", prompt_field,
                 prompt[i], i, vocab);
    }
  }
  for (int32_t stop_id : fields.stop_ids) {
    if (stop_id < 0 || stop_id >= vocab) {
      fail_field(ErrorCode::kInvalidArgument, "stop_token_ids",
                 "'stop_token_ids' holds {}, outside the vocabulary [0, {})", stop_id, vocab);
    }
  }
  runtime::EngineRequest er;
  er.id = std::move(id);
  er.prompt = std::move(prompt);
  fields.apply_to(er);
  er.max_tokens =
      effective_max_tokens(fields.max_tokens, host.default_max_tokens(), n_prompt, max_len);
  return er;
}

std::vector<int32_t> encode_chat(const ModelHost& host, const Json& messages, const Json& tools,
                                 const std::string& field, std::string_view instead,
                                 const cli::ChatOptions& options) {
  const auto chat = host.chat();
  if (!chat) {
    fail_field(ErrorCode::kInvalidArgument, field, "model '{}' has no chat template; {}",
               host.name(), instead);
  }
  try {
    return chat->encode(messages, options, tools);
  } catch (const Error& e) {
    // The template judges the conversation (raise_exception on roles that do not alternate):
    // the caller's input, so the error names it.
    throw Error(e.code(), field, fmt::format("chat template: {}", e.what()));
  }
}

// ---- finished requests ---------------------------------------------------------------------

const char* finish_reason(runtime::EngineFinish finish) {
  return runtime::engine_finish_name(finish);
}

std::optional<Error> finish_error(const runtime::EngineEvent& ev, CancelCause cause) {
  switch (ev.finish) {
    case runtime::EngineFinish::kStop:
    case runtime::EngineFinish::kLength: return std::nullopt;
    case runtime::EngineFinish::kTimeout:
      return Error(ErrorCode::kDeadlineExceeded, "the request exceeded its time limit");
    case runtime::EngineFinish::kCancelled:
      switch (cause) {
        case CancelCause::kDeadline:
          return Error(ErrorCode::kDeadlineExceeded, "the request exceeded its deadline");
        case CancelCause::kClient:
          return Error(ErrorCode::kCancelled, "the client cancelled the request");
        case CancelCause::kServer:
          return Error(ErrorCode::kUnavailable,
                       "the request was cancelled (the server is shutting down)");
      }
      break;
    case runtime::EngineFinish::kError: break;
  }
  return Error(ErrorCode::kInternal, "generation failed: " +
                                         (ev.error.empty() ? std::string("unknown error")
                                                           : ev.error));
}

// ---- API keys ------------------------------------------------------------------------------

namespace {

// Every byte is compared so the time does not reveal how much of a key matched.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

ApiKeyCheck check_api_key(const std::vector<std::string>& keys,
                          const std::string_view* authorization) {
  if (keys.empty()) return ApiKeyCheck::kOk;
  if (authorization == nullptr) return ApiKeyCheck::kMissing;
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view value = *authorization;
  const auto same_letter = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  };
  if (value.size() < kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), value.begin(), same_letter)) {
    return ApiKeyCheck::kNotBearer;
  }
  const std::string_view given = value.substr(kBearer.size());
  bool ok = false;
  // An empty key is never valid, even if one was configured by mistake.
  for (const std::string& k : keys) ok |= constant_time_equal(given, k) && !given.empty();
  return ok ? ApiKeyCheck::kOk : ApiKeyCheck::kWrongKey;
}

const char* api_key_message(ApiKeyCheck result) {
  switch (result) {
    case ApiKeyCheck::kOk: return "";
    case ApiKeyCheck::kMissing:
      return "authorization: an API key is required ('Authorization: Bearer <key>')";
    case ApiKeyCheck::kNotBearer: return "authorization: expected 'Bearer <key>'";
    case ApiKeyCheck::kWrongKey: return "authorization: invalid API key";
  }
  return "authorization: invalid API key";
}

// Defined here, with the table, so the parsers (and their fuzz targets) need no gateway code.
int RequestError::status() const { return http_status(code()); }

// ---- KServe admission (both KServe fronts; the decoding itself is kserve_decode.cc) --------

void check_kserve_model(const ModelHost& host, const std::string& name,
                        const std::string& version) {
  check_model_name(host, name, "name");
  if (!version.empty() && version != kKserveModelVersion) {
    fail_field(ErrorCode::kNotFound, "version", "model '{}' has no version '{}'", name, version);
  }
}

runtime::EngineRequest kserve_engine_request(const ModelHost& host, const runtime::Engine& engine,
                                             const KserveInferRequest& in, std::string id) {
  std::vector<int32_t> prompt = in.text ? engine.tokenizer().encode(*in.text, true) : in.ids;
  runtime::EngineRequest er = engine_request(host, engine, std::move(id), std::move(prompt),
                                             in.fields, in.text ? "text_input" : "input_ids");
  er.sampling.logprobs = false;
  return er;
}

// ---- classic (tensor) models over KServe v2 --------------------------------------------------

std::string tensor_model_message(const ModelHost& host) {
  return fmt::format("model '{}' is a tensor model (a classic model, not a language model); use "
                     "KServe v2 inference: POST /v2/models/{}/infer or gRPC ModelInfer",
                     host.name(), host.name());
}

std::shared_ptr<runtime::TensorSession> admit_tensor(const ModelHost& host,
                                                     const std::string& model,
                                                     const std::string& model_field) {
  if (!model.empty()) check_model_name(host, model, model_field);
  std::shared_ptr<runtime::TensorSession> session = host.tensor_session();
  if (session == nullptr) return nullptr;
  SAMPAN_CHECK(!host.draining(), ErrorCode::kUnavailable, "the server is shutting down");
  return session;
}

std::map<std::string, Tensor> kserve_tensor_feeds(const runtime::TensorSession& session,
                                                  KserveTensorRequest& request) {
  const models::Signature& sig = session.signature();
  std::map<std::string, Tensor> feeds;
  for (KserveTensorInput& in : request.inputs) {
    const auto spec = std::find_if(sig.inputs.begin(), sig.inputs.end(),
                                   [&](const models::TensorSpec& s) { return s.api_name == in.name; });
    if (spec == sig.inputs.end()) {
      std::vector<std::string> names;
      for (const auto& s : sig.inputs) names.push_back(s.api_name);
      fail_field(ErrorCode::kInvalidArgument, in.name, "unknown input '{}'; the model takes {}",
                 in.name, fmt::join(names, ", "));
    }
    const std::string want = kserve_spec_datatype(*spec);
    if (in.datatype != want) {
      fail_field(ErrorCode::kInvalidArgument, in.name,
                 "input '{}' has datatype {}; the model takes {}", in.name, in.datatype, want);
    }
    feeds[in.name] = std::move(in.value);
  }
  return feeds;
}

std::vector<TensorOutputChoice> kserve_tensor_outputs(const runtime::TensorSession& session,
                                                      const KserveTensorRequest& request) {
  const models::Signature& sig = session.signature();
  std::vector<TensorOutputChoice> out;
  if (request.outputs.empty()) {
    for (size_t i = 0; i < sig.outputs.size(); ++i) out.push_back({i, request.binary_output});
    return out;
  }
  for (const KserveTensorRequest::Output& o : request.outputs) {
    size_t i = 0;
    while (i < sig.outputs.size() && sig.outputs[i].api_name != o.name) ++i;
    if (i == sig.outputs.size()) {
      std::vector<std::string> names;
      for (const auto& s : sig.outputs) names.push_back(s.api_name);
      fail_field(ErrorCode::kInvalidArgument, o.name, "unknown output '{}'; the model has {}",
                 o.name, fmt::join(names, ", "));
    }
    for (const TensorOutputChoice& c : out) {
      if (c.index == i) {
        fail_field(ErrorCode::kInvalidArgument, o.name, "output '{}' is requested twice", o.name);
      }
    }
    out.push_back({i, o.binary});
  }
  return out;
}

std::vector<int64_t> kserve_shape(const models::TensorSpec& spec) {
  std::vector<int64_t> dims;
  for (const graph::Dim& d : spec.shape) dims.push_back(d.symbolic() ? -1 : d.size);
  return dims;
}

std::string kserve_spec_datatype(const models::TensorSpec& spec) {
  const char* name = kserve_datatype(spec.dtype);
  return name ? name : dtype_name(spec.dtype);
}

}  // namespace sampan::server
