// `sampan bench-serve`: the clients that send one streaming request each and time it. Requests
// run asynchronously (HTTP on Asio coroutines, gRPC on callback reactors), so thousands may be
// in flight without a thread each. Every request ends in exactly one call of its `Done`, on a
// client thread, within its timeout: a failure is a record with ok = false and an error kind,
// never an exception.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "clients/bench_serve/bench_serve_stats.h"
#include "clients/bench_serve/bench_serve_workload.h"

namespace sampan::bench {

enum class Backend { kOpenAiCompletions, kOpenAiChat, kGrpcGenerate };

const char* backend_name(Backend b);

struct ClientOptions {
  Backend backend = Backend::kOpenAiCompletions;
  std::string url;       // HTTP backends: http[s]://host[:port][/prefix]
  std::string endpoint;  // HTTP path after the prefix; empty: /v1/completions or /v1/chat/completions
  std::string grpc_target;  // gRPC: host:port
  bool grpc_tls = false;
  std::string model;    // empty: not sent (HTTP) / the only served model (gRPC)
  std::string api_key;  // sent as "Authorization: Bearer <key>"
  bool ignore_eos = false;
  std::string extra_body;  // HTTP: a JSON object merged into every request body
  std::string ca_cert;     // TLS: trust this PEM file instead of the system roots
  bool insecure = false;   // TLS: do not verify the server's certificate
  double timeout_s = 300;  // per request, from send to the end of the stream
  // --disconnect-fraction: this fraction of requests is abandoned on purpose (plan_disconnect of
  // `disconnect_seed` and the request's index): the HTTP client closes the connection, the gRPC
  // client cancels the call, and the record says `disconnected`.
  double disconnect_fraction = 0;
  uint64_t disconnect_seed = 0;
  int io_threads = 2;
};

using Clock = std::chrono::steady_clock;
using Done = std::function<void(RequestRecord)>;

class Client {
 public:
  virtual ~Client() = default;
  // Checks the server answers at all (TCP connect, TLS handshake, or the gRPC channel coming
  // up) within `wait_s`; throws Error(kUnavailable) with the reason when it does not.
  virtual void check_reachable(double wait_s) = 0;
  // The model to ask for when none was given: the first of GET /v1/models (HTTP), "" else or
  // when the server does not list models.
  virtual std::string discover_model(double wait_s) = 0;
  // Sends `prompt` now; `bench_start` is the time record.start_s is measured from.
  virtual void start(int64_t index, const Prompt& prompt, Clock::time_point bench_start,
                     Done done) = 0;
};

// Throws Error(kInvalidArgument) for an unusable URL, target, certificate or extra body.
std::unique_ptr<Client> make_http_client(const ClientOptions& options);
std::unique_ptr<Client> make_grpc_client(const ClientOptions& options);

// The OpenAI request body for `prompt` (exposed for tests).
std::string openai_request_body(const ClientOptions& options, const Prompt& prompt);

}  // namespace sampan::bench
