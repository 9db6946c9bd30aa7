// The boundary between the HTTP transport (http_server.cc: Boost.Beast, TLS, keep-alive, body
// limits, auth) and the API handlers (openai_api.cc, kserve_rest.cc, /metrics). Handlers never
// see Beast types; the transport never parses API bodies.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sampan::server {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // path with query, e.g. "/v1/models?x=1"
  std::string path;                            // target without the query
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string request_id;                      // X-Request-Id if the client sent one, else generated
  std::string remote;                          // peer address, for logs
};

// How a handler answers. Exactly one of: respond() once, or start_stream() then any number of
// write() and one end(). Every method may be called from any thread (the transport posts the
// work to the connection's strand); calls after the connection closed are ignored.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response. `content_type` e.g. "application/json".
  virtual void respond(int status, std::string body,
                       std::string content_type = "application/json",
                       std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  // A streamed response with chunked transfer encoding (SSE: content_type
  // "text/event-stream"); the headers go out at once.
  virtual void start_stream(int status, std::string content_type,
                            std::vector<std::pair<std::string, std::string>> headers = {}) = 0;
  virtual void write(std::string chunk) = 0;  // queued in order; never blocks
  virtual void end() = 0;
  // True once the peer has gone (reset, closed, write failed) or the server is stopping hard.
  virtual bool closed() const = 0;
  // Called once, on the connection's thread, when the peer goes away before end() — the handler
  // cancels its engine request here. Set it before start_stream(). Not called after end().
  virtual void on_close(std::function<void()> callback) = 0;
};

// A handler owns the writer (shared) for as long as it streams.
using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<ResponseWriter>)>;

// Writes the JSON error body every API uses: {"error": {"message", "type", "param", "code"}}
// (OpenAI shape; KServe clients read "error" too). `param` names the offending field or is
// empty. Defined in http_server.cc.
std::string error_json(const std::string& message, const std::string& type,
                       const std::string& param, int code);

}  // namespace sampan::server
