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

// Sends error_json() for `e` (status from gateway.h's table, `param` from e.field()) and records
// it as `api` in the metrics.
void send_error(ResponseWriter& writer, ServeMetrics& metrics, const char* api, const Error& e);

}  // namespace sampan::server
