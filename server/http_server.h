// The HTTP/1.1 server: Boost.Beast on Boost.Asio. A few I/O threads run every connection as
// asynchronous operations (no thread per connection), so thousands of idle or streaming
// connections cost only their buffers. Optional TLS (OpenSSL through asio::ssl), keep-alive,
// a request body limit (413), a connection limit, an idle timeout, and API-key auth (401) on
// every path but the public ones. Responses and SSE chunks may be produced on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/http_types.h"
#include "server/serve_metrics.h"

namespace sampan::server {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;                    // 0: any free port; start() returns it
  int threads = 1;                    // I/O threads
  int64_t max_body_bytes = 4 << 20;   // larger bodies: 413 with error_json, connection closed
  int64_t max_connections = 4096;     // beyond: the new connection is closed at once
  double idle_timeout_s = 60;         // between requests on a keep-alive connection
  std::string tls_cert, tls_key;      // both set: HTTPS only
  std::vector<std::string> api_keys;  // non-empty: "Authorization: Bearer <key>" required (401)
  // Paths served without auth (exact match): health probes and metrics by default.
  std::vector<std::string> public_paths = {"/health", "/v2/health/live", "/v2/health/ready",
                                           "/metrics"};
};

class HttpServer {
 public:
  // `handler` gets every authorised request whose body fits; `metrics` (may be null) counts the
  // transport's own refusals (401, 413) as api "other".
  HttpServer(HttpServerOptions options, HttpHandler handler, ServeMetrics* metrics);
  ~HttpServer();  // stop()

  // Binds and starts the I/O threads; returns the bound port. Throws Error(kIo) naming the
  // address when it cannot bind, Error(kInvalidArgument) for unreadable TLS files.
  int start();
  // Closes the listening socket: no new connections; open ones continue.
  void stop_accepting();
  // Closes every connection (streams see closed() and on_close) and joins the I/O threads.
  void stop();
  int64_t open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::server
