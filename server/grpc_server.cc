// GrpcServer: builds the grpc::Server (listening address, TLS, message limits) around the two
// callback services of grpc_kserve.cc and grpc_generate.cc, and the helpers they share.
#include "server/grpc_server.h"

#include <grpcpp/security/server_credentials.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <sstream>

#include "engine/core/log.h"
#include "server/grpc_common.h"

namespace sampan::server {
namespace grpc_detail {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode Table 3-7: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 with *bad set to the length of the maximal subpart
// of an ill-formed one (>= 1): the bytes one U+FFFD replaces.
size_t utf8_sequence(std::string_view s, size_t i, size_t* bad) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    *bad = 1;  // a continuation byte, C0/C1 or F5..FF
    return 0;
  }
  size_t k = 1;
  for (; k < len && i + k < s.size(); ++k) {
    const unsigned char x = byte(i + k);
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) break;
  }
  if (k == len) return len;
  *bad = k;
  return 0;
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  size_t done = 0;  // s[0, done) is in `out` already
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0;
    const size_t n = utf8_sequence(s, i, &bad);
    if (n > 0) {
      i += n;
      continue;
    }
    if (out.empty()) out.reserve(s.size() + 2);
    out.append(s.substr(done, i - done));
    out.append(kReplacement);
    i += bad;
    done = i;
  }
  if (done == 0) return std::string(s);  // valid: the common case, one copy
  out.append(s.substr(done));
  return out;
}

grpc::Status check_auth(const ServiceContext& svc, const grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  std::string_view value;
  if (it != md.end()) value = std::string_view(it->second.data(), it->second.size());
  const ApiKeyCheck check = check_api_key(svc.api_keys, it != md.end() ? &value : nullptr);
  if (check == ApiKeyCheck::kOk) return grpc::Status::OK;
  return {kUnauthenticatedStatus.grpc, api_key_message(check)};
}

grpc::Status status_from_error(const Error& e) {
  // Messages may quote what the client sent (a BYTES input is any bytes).
  return {grpc_status(e.code()), valid_utf8(e.what())};
}

grpc::Status status_from_final(const runtime::EngineEvent& ev,
                               const grpc::CallbackServerContext* ctx) {
  CancelCause cause = CancelCause::kServer;
  if (ctx->deadline() <= std::chrono::system_clock::now()) {
    cause = CancelCause::kDeadline;
  } else if (ctx->IsCancelled()) {
    cause = CancelCause::kClient;
  }
  const std::optional<Error> e = finish_error(ev, cause);
  return e ? status_from_error(*e) : grpc::Status::OK;
}

grpc::Status status_from_current_exception() { return status_from_error(current_error()); }

double request_timeout_s(const grpc::CallbackServerContext* ctx,
                         const runtime::EngineOptions& options) {
  double limit = options.request_timeout_s > 0 ? options.request_timeout_s : 0.0;
  auto deadline = ctx->deadline();
  // gRPC reports "no deadline" as the far future.
  if (deadline < std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    double left = std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count();
    SAMPAN_CHECK(left > 0, ErrorCode::kDeadlineExceeded, "the deadline passed before start");
    limit = limit > 0 ? std::min(limit, left) : left;
  }
  return limit;
}

std::string request_id_or_new(ServiceContext& svc, const std::string& given) {
  if (!given.empty()) return given;
  return "grpc-" + std::to_string(svc.next_request_id.fetch_add(1));
}

void record_rpc(ServiceContext& svc, const char* method, const std::string& request_id,
                const grpc::Status& status) {
  svc.metrics.request_done("grpc", static_cast<int>(status.error_code()));
  if (status.ok()) {
    log::debug("grpc {} id={} status=OK", method, request_id);
  } else {
    log::info("grpc {} id={} status={} message=\"{}\"", method, request_id,
              static_cast<int>(status.error_code()), status.error_message());
  }
}

}  // namespace grpc_detail

namespace {

std::string read_pem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  SAMPAN_CHECK(in.good(), ErrorCode::kIo, "grpc: cannot read {} '{}'", what, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The largest response the server sends. Responses are the server's own output, bounded by the
// context length: a whole ModelInfer answer for a 1M-token context is ~4 MiB of output_ids plus
// its text, and Generate streams a few tokens per message. So this does not follow
// --max-body-bytes (a small request limit must not fail long answers after generating them);
// it only keeps a bug from building an unbounded message.
constexpr int64_t kMaxSendMessageBytes = int64_t{64} << 20;

// "::1" and other IPv6 literals need brackets in a gRPC address.
std::string listen_address(const std::string& host, int port) {
  bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

struct GrpcServer::Impl {
  GrpcServerOptions options;
  grpc_detail::ServiceContext svc;
  std::unique_ptr<grpc::Service> kserve;
  std::unique_ptr<grpc::Service> generate;
  std::unique_ptr<grpc::Server> server;
  bool stopped = false;

  Impl(GrpcServerOptions o, ModelHost& host, ServeMetrics& metrics)
      : options(std::move(o)), svc{host, metrics, options.api_keys} {}
};

GrpcServer::GrpcServer(GrpcServerOptions options, ModelHost& host, ServeMetrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), host, metrics)) {}

GrpcServer::~GrpcServer() {
  if (impl_->server && !impl_->stopped) shutdown(0);
}

int GrpcServer::start() {
  SAMPAN_CHECK(!impl_->server, ErrorCode::kInternal, "grpc: the server is already started");
  const auto& o = impl_->options;
  SAMPAN_CHECK(o.tls_cert.empty() == o.tls_key.empty(), ErrorCode::kInvalidArgument,
               "grpc: tls_cert and tls_key must be given together");
  SAMPAN_CHECK(o.max_message_bytes > 0, ErrorCode::kInvalidArgument,
               "grpc: max_message_bytes must be > 0 (got {})", o.max_message_bytes);

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!o.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back(
        {read_pem(o.tls_key, "TLS key"), read_pem(o.tls_cert, "TLS certificate")});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  impl_->kserve = grpc_detail::make_kserve_service(impl_->svc);
  impl_->generate = grpc_detail::make_generate_service(impl_->svc);

  grpc::ServerBuilder builder;
  int bound_port = 0;
  const std::string address = listen_address(o.host, o.port);
  builder.AddListeningPort(address, creds, &bound_port);
  // Requests: the same limit as an HTTP body (--max-body-bytes, kDefaultMaxMessageBytes unless
  // set), set explicitly rather than left to gRPC's default. gRPC checks it before a message is
  // parsed and fails a larger one with RESOURCE_EXHAUSTED, so no handler ever sees it. gRPC takes
  // an int: larger limits are capped.
  const auto as_int = [](int64_t v) {
    return static_cast<int>(std::min<int64_t>(v, std::numeric_limits<int>::max()));
  };
  builder.SetMaxReceiveMessageSize(as_int(o.max_message_bytes));
  builder.SetMaxSendMessageSize(as_int(std::max(kMaxSendMessageBytes, o.max_message_bytes)));
  // Parsing keeps protobuf's default recursion limit of 100 nested messages or groups: gRPC
  // parses with MessageLite::ParseFromZeroCopyStream, which uses CodedInputStream's default,
  // and nothing in Sampan calls CodedInputStream::SetDefaultRecursionLimit. Valid requests
  // never come near it: the deepest path is ModelInferRequest > InferInputTensor > parameters
  // map entry > InferParameter (4 levels), or GenerateRequest > ChatMessages > ChatMessage (3),
  // and no message type is recursive. Only unknown fields (nested groups) can go deeper, and
  // protobuf counts them against the same limit: such a request fails to parse and gRPC
  // refuses it before any handler runs, so no request can exhaust a thread's stack
  // (test_bad_grpc.py sends 5000 nested groups).
  builder.RegisterService(impl_->kserve.get());
  builder.RegisterService(impl_->generate.get());
  impl_->server = builder.BuildAndStart();
  SAMPAN_CHECK(impl_->server && bound_port > 0, ErrorCode::kIo,
               "grpc: cannot listen on {} (address in use or not available)", address);
  log::debug("grpc: listening on {}{}", listen_address(o.host, bound_port),
            o.tls_cert.empty() ? "" : " (TLS)");
  return bound_port;
}

void GrpcServer::shutdown(double grace_s) {
  if (!impl_->server || impl_->stopped) return;
  impl_->stopped = true;
  // Past the deadline gRPC cancels the calls still running; their reactors cancel the engine
  // requests and finish once the engine has confirmed, so Shutdown() returns after that.
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::duration_cast<std::chrono::system_clock::duration>(
                      std::chrono::duration<double>(std::max(0.0, grace_s)));
  impl_->server->Shutdown(deadline);
  impl_->server->Wait();
}

}  // namespace sampan::server
