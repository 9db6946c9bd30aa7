// The gRPC server (callback API of gRPC C++: reactors, no thread per stream) with two services:
//   inference.GRPCInferenceService (KServe v2, proto/grpc_service.proto): ServerLive,
//     ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer and Triton's
//     ModelStreamInfer. LLM tensors follow the convention of Triton's vLLM backend: input
//     "text_input" (BYTES [1]) or "input_ids" (INT32 [n]), optional "max_tokens" (INT32 [1]),
//     "stream" (BOOL [1]), "sampling_parameters" (BYTES [1], a JSON object), outputs
//     "text_output" (BYTES [1]) and "output_ids" (INT32 [n]).
//   sampan.v1.Generate (proto/sampan_generate.proto): server-streaming Generate with every
//     sampling parameter, token ids, text deltas, logprobs, finish reason and usage.
// API keys are checked on the "authorization: Bearer <key>" metadata (UNAUTHENTICATED);
// deadlines and client cancellation cancel the engine request; errors get the gRPC status of
// gateway.h's table, the same failures the HTTP API answers with the paired HTTP status.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/model_host.h"
#include "server/serve_metrics.h"

namespace sampan::server {

// The default request size limit: the default of --max-body-bytes (ServeConfig::max_body_bytes),
// which `sampan serve` passes as max_message_bytes so that HTTP and gRPC take the same requests.
inline constexpr int64_t kDefaultMaxMessageBytes = int64_t{4} << 20;

struct GrpcServerOptions {
  std::string host = "0.0.0.0";
  int port = 8001;                    // 0: any free port; start() returns it
  std::string tls_cert, tls_key;      // both set: TLS
  std::vector<std::string> api_keys;  // non-empty: required on every RPC but the health ones
  // Larger request messages fail with RESOURCE_EXHAUSTED before they are parsed.
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
};

class GrpcServer {
 public:
  GrpcServer(GrpcServerOptions options, ModelHost& host, ServeMetrics& metrics);
  ~GrpcServer();
  // Builds and starts the server; returns the bound port. Throws Error(kIo) when it cannot bind.
  int start();
  // Stops accepting RPCs and waits up to `grace_s` for running ones, then cancels them.
  void shutdown(double grace_s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::server
