// OpenAI-compatible handlers: POST /v1/completions, POST /v1/chat/completions (both with SSE
// streaming), GET /v1/models. Responses follow OpenAI's shapes (ids "cmpl-..." /
// "chatcmpl-...", choices, usage with prompt_tokens_details.cached_tokens, logprobs).
//
// Threading: the handler validates, tokenises and submits on the transport's thread; engine
// events arrive on the engine thread, where they are only formatted and written; a client that
// goes away (writer on_close) cancels its engine request.
#pragma once

#include <memory>
#include <string>

#include "engine/core/error.h"
#include "server/http_types.h"
#include "server/model_host.h"
#include "server/serve_metrics.h"

namespace sampan::server {

void handle_completions(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                        ModelHost& host, ServeMetrics& metrics);
void handle_chat_completions(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                             ModelHost& host, ServeMetrics& metrics);
void handle_models(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                   ModelHost& host, ServeMetrics& metrics);

// Shared with kserve_rest.cc: the HTTP status of an engine error (kInvalidArgument 400,
// kNotFound 404, kResourceExhausted 429, kUnavailable 503, kDeadlineExceeded 504, others 500),
// and the OpenAI error "type" for a status.
int http_status(ErrorCode code);
const char* error_type(int status);
// Best effort: the request field an engine kInvalidArgument message is about ("" if none).
std::string field_in_message(const std::string& message);
// Sends error_json() with `status` and records it as `api` in the metrics.
void send_error(ResponseWriter& writer, ServeMetrics& metrics, const char* api, int status,
                const std::string& message, const std::string& param);

}  // namespace sampan::server
