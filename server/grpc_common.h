// Private to the gRPC server (grpc_server.cc, grpc_kserve.cc, grpc_generate.cc): what the
// services share — the serving context, API-key checks, the mapping of engine errors and
// finishes to gRPC status codes, and the request-id and deadline helpers.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/service_type.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/engine.h"
#include "server/model_host.h"
#include "server/serve_metrics.h"

namespace sampan::server::grpc_detail {

// `s` with every ill-formed UTF-8 sequence replaced by U+FFFD, one per maximal subpart (Unicode
// 3.9, as nlohmann's error_handler_t::replace does for the HTTP API's JSON). proto3 `string`
// fields must hold valid UTF-8: clients refuse to parse a message that does not (and protobuf
// logs an error serializing it), so every text that may hold arbitrary bytes goes through this
// before it lands in one — generated text (a byte-fallback token such as <0xE2> decodes to a lone
// byte), a token's own text, stop strings, error messages and status details.
std::string valid_utf8(std::string_view s);

// What every RPC handler reads; owned by GrpcServer::Impl and outliving the grpc::Server.
struct ServiceContext {
  ModelHost& host;
  ServeMetrics& metrics;
  std::vector<std::string> api_keys;
  std::atomic<uint64_t> next_request_id{1};
};

// OK when no keys are configured or the call carries "authorization: Bearer <key>" with one
// of them; UNAUTHENTICATED otherwise.
grpc::Status check_auth(const ServiceContext& svc, const grpc::CallbackServerContext* ctx);

grpc::Status status_from_error(const Error& e);
// The status a request ends with, from its final engine event: OK for stop and length; a
// cancellation is DEADLINE_EXCEEDED once the call's deadline has passed (gRPC cancels the call
// then), CANCELLED when the client cancelled, else UNAVAILABLE (the server is shutting down).
grpc::Status status_from_final(const runtime::EngineEvent& final_event,
                               const grpc::CallbackServerContext* ctx);
// Anything a handler may throw while building a request (Error, RequestError, ...), as a status;
// nothing may escape to gRPC's threads.
grpc::Status status_from_current_exception();

// The engine serving `model` (empty names the served model), or a status: NOT_FOUND for
// another name, UNAVAILABLE while loading or draining.
std::shared_ptr<runtime::Engine> find_engine(const ServiceContext& svc, const std::string& model,
                                             grpc::Status* status);

// The engine timeout for a call: seconds left until the client's deadline, capped by the
// server's default request timeout; 0 when neither is set. Sets *expired when the deadline has
// already passed.
double request_timeout_s(const grpc::CallbackServerContext* ctx,
                         const runtime::EngineOptions& options, bool* expired);

// The client's id, or a fresh "grpc-N".
std::string request_id_or_new(ServiceContext& svc, const std::string& given);

// The max_tokens a request runs with: the requested value or the server default, capped to what
// fits in the context after the prompt. An over-long prompt keeps the requested value so that
// the engine refuses it with its own message.
int64_t max_tokens_for(const ServiceContext& svc, const runtime::Engine& engine,
                       std::optional<int64_t> requested, size_t prompt_tokens);

// Seconds between two steady-clock points.
inline double seconds_between(std::chrono::steady_clock::time_point a,
                              std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Records the finished RPC and logs it with its request id.
void record_rpc(ServiceContext& svc, const char* method, const std::string& request_id,
                const grpc::Status& status);

std::unique_ptr<grpc::Service> make_kserve_service(ServiceContext& svc);
std::unique_ptr<grpc::Service> make_generate_service(ServiceContext& svc);

}  // namespace sampan::server::grpc_detail
