// The HTTP API: OpenAI-compatible routes (/v1/completions, /v1/chat/completions with SSE
// streaming, /v1/models), KServe v2 REST (/v2/health/live, /v2/health/ready, /v2, /v2/models/{m},
// /v2/models/{m}/ready, /v2/models/{m}/infer), /health and /metrics, behind one dispatcher.
// Every error is a 4xx/5xx with error_json() naming the offending field.
#pragma once

#include "server/http_types.h"
#include "server/model_host.h"
#include "server/serve_metrics.h"

namespace sampan::server {

// The dispatcher for HttpServer. `host` and `metrics` must outlive it.
HttpHandler make_api_router(ModelHost& host, ServeMetrics& metrics);

}  // namespace sampan::server
