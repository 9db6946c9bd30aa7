#include "server/api_routes.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "server/gateway.h"
#include "server/kserve_rest.h"
#include "server/openai_api.h"
#include "server/request_parse.h"

namespace sampan::server {
namespace {

constexpr const char* kOpenAi = "openai";
constexpr const char* kOther = "other";

bool starts_with_segment(const std::string& path, const char* prefix) {
  const std::string p(prefix);
  return path == p || path.rfind(p + "/", 0) == 0;
}

using Route = void (*)(const HttpRequest&, std::shared_ptr<ResponseWriter>, ModelHost&,
                       ServeMetrics&);

struct OpenAiRoute {
  const char* path;
  const char* method;
  Route handler;
};

constexpr OpenAiRoute kOpenAiRoutes[] = {
    {"/v1/completions", "POST", handle_completions},
    {"/v1/chat/completions", "POST", handle_chat_completions},
    {"/v1/models", "GET", handle_models},
};

void not_allowed(const HttpRequest& req, ResponseWriter& w, ServeMetrics& metrics,
                 const char* api, const char* allowed) {
  w.respond(405,
            error_json(fmt::format("{} is not allowed on {}; use {}", req.method, req.path,
                                   allowed),
                       error_type(405), "", 405),
            "application/json", {{"Allow", allowed}});
  metrics.request_done(api, 405);
}

void route(const HttpRequest& req, const std::shared_ptr<ResponseWriter>& writer,
           ModelHost& host, ServeMetrics& metrics) {
  for (const OpenAiRoute& r : kOpenAiRoutes) {
    if (req.path != r.path) continue;
    if (req.method != r.method) return not_allowed(req, *writer, metrics, kOpenAi, r.method);
    return r.handler(req, writer, host, metrics);
  }
  if (starts_with_segment(req.path, "/v2")) return handle_kserve(req, writer, host, metrics);
  if (req.path == "/health") {
    if (req.method != "GET") return not_allowed(req, *writer, metrics, kOther, "GET");
    const bool ready = host.ready();
    writer->respond(ready ? 200 : 503,
                    ready ? R"({"status":"ok"})"
                          : (host.draining() ? R"({"status":"draining"})"
                                             : R"({"status":"loading"})"));
    return metrics.request_done(kOther, ready ? 200 : 503);
  }
  if (req.path == "/metrics") {
    if (req.method != "GET") return not_allowed(req, *writer, metrics, kOther, "GET");
    writer->respond(200, metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    return metrics.request_done(kOther, 200);
  }
  const char* api = starts_with_segment(req.path, "/v1") ? kOpenAi : kOther;
  send_error(*writer, metrics, api,
             Error(ErrorCode::kNotFound, fmt::format("no route for {} {}", req.method, req.path)));
}

}  // namespace

HttpHandler make_api_router(ModelHost& host, ServeMetrics& metrics) {
  return [&host, &metrics](const HttpRequest& req, std::shared_ptr<ResponseWriter> writer) {
    const char* api = starts_with_segment(req.path, "/v1") ? kOpenAi : kOther;
    // Handlers answer their own errors; whatever escapes is still answered, never thrown into
    // the transport. A handler throws only before it has answered or submitted.
    try {
      route(req, writer, host, metrics);
    } catch (...) {
      const Error e = current_error();
      if (http_status(e.code()) >= 500)
        log::warn("request {} {} {}: {}", req.request_id, req.method, req.path, e.what());
      send_error(*writer, metrics, api, e);
    }
  };
}

}  // namespace sampan::server
