// Private to the gRPC server (grpc_server.cc, grpc_kserve.cc, grpc_generate.cc): what the
// services share — the serving context, and gRPC's side of gateway.h (API keys from metadata,
// errors and finishes as grpc::Status, the client's deadline), and the request-id helper.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/service_type.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/engine.h"
#include "server/gateway.h"
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

// gateway's check_api_key on the "authorization" metadata: OK, or UNAUTHENTICATED.
grpc::Status check_auth(const ServiceContext& svc, const grpc::CallbackServerContext* ctx);

// The status of `e` from gateway.h's table, its message made valid UTF-8.
grpc::Status status_from_error(const Error& e);
// The status a request ends with, from its final engine event (gateway's finish_error): a
// cancellation counts as the deadline's once it has passed (gRPC cancels the call then), as the
// client's when it cancelled, else as the server's (shutting down).
grpc::Status status_from_final(const runtime::EngineEvent& final_event,
                               const grpc::CallbackServerContext* ctx);
// Anything a handler may throw while building a request, as a status (gateway's
// current_error); nothing may escape to gRPC's threads.
grpc::Status status_from_current_exception();

// The engine timeout for a call: seconds left until the client's deadline, capped by the
// server's default request timeout; 0 when neither is set. Throws Error(kDeadlineExceeded) when
// the deadline has already passed.
double request_timeout_s(const grpc::CallbackServerContext* ctx,
                         const runtime::EngineOptions& options);

// The client's id, or a fresh "grpc-N".
std::string request_id_or_new(ServiceContext& svc, const std::string& given);

// Records the finished RPC and logs it with its request id.
void record_rpc(ServiceContext& svc, const char* method, const std::string& request_id,
                const grpc::Status& status);

std::unique_ptr<grpc::Service> make_kserve_service(ServiceContext& svc);
std::unique_ptr<grpc::Service> make_generate_service(ServiceContext& svc);

}  // namespace sampan::server::grpc_detail
