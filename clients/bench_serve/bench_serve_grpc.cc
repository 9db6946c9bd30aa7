// The gRPC client of `sampan bench-serve`: sampan.v1.Generate over one channel (HTTP/2
// multiplexes every call), each call a callback reactor that timestamps its responses as they
// are read. The call's deadline is the request's timeout.
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <mutex>
#include <sstream>

#include "engine/core/error.h"
#include "proto/sampan_generate.grpc.pb.h"
#include "clients/bench_serve/bench_serve_client.h"

namespace sampan::bench {
namespace {

namespace pb = ::sampan::v1;

std::string code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return std::to_string(static_cast<int>(code));
  }
}

const char* state_name(grpc_connectivity_state s) {
  switch (s) {
    case GRPC_CHANNEL_IDLE: return "idle";
    case GRPC_CHANNEL_CONNECTING: return "connecting";
    case GRPC_CHANNEL_READY: return "ready";
    case GRPC_CHANNEL_TRANSIENT_FAILURE: return "failing to connect";
    case GRPC_CHANNEL_SHUTDOWN: return "shut down";
  }
  return "in an unknown state";
}

std::chrono::system_clock::time_point deadline_in(double s) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(s));
}

// One call; deletes itself when gRPC reports it done.
class GenerateCall final : public grpc::ClientReadReactor<pb::GenerateResponse> {
 public:
  GenerateCall(pb::Generate::Stub* stub, const ClientOptions& o, int64_t index,
               const Prompt& prompt, Clock::time_point bench_start, Done done)
      : done_(std::move(done)),
        plan_(plan_disconnect(o.disconnect_fraction, o.disconnect_seed, index)) {
    record_.index = index;
    record_.expected_input_tokens = prompt.expected_input_tokens;
    record_.max_tokens = prompt.max_tokens;
    if (!o.model.empty()) request_.set_model(o.model);
    if (prompt.messages.empty()) {
      request_.set_text(prompt.text);
    } else {
      for (const ChatTurn& t : prompt.messages) {
        pb::ChatMessage* m = request_.mutable_chat()->add_messages();
        m->set_role(t.role);
        m->set_content(t.content);
      }
    }
    request_.set_max_tokens(prompt.max_tokens);
    request_.set_ignore_eos(o.ignore_eos);
    request_.set_request_id("bench-" + std::to_string(index));
    if (!o.api_key.empty()) context_.AddMetadata("authorization", "Bearer " + o.api_key);
    context_.set_deadline(deadline_in(o.timeout_s));
    start_ = Clock::now();
    record_.start_s = std::chrono::duration<double>(start_ - bench_start).count();
    stub->async()->Generate(&context_, &request_, this);
    const bool cancel_now = plan_.abandon && plan_.after_chunks == 0;
    // The hold keeps OnDone (which deletes this) from running before TryCancel below.
    if (cancel_now) {
      AddHold();
      abandoned_ = true;  // before StartCall: the callbacks see it
    }
    StartRead(&response_);
    StartCall();
    if (cancel_now) {
      // Abandoned before reading any response (the request may or may not reach the server).
      context_.TryCancel();
      RemoveHold();
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows with the status
    const double t = since_start();
    if (response_.token_ids_size() > 0) {
      record_.chunk_s.push_back(t);
      record_.chunk_tokens.push_back(response_.token_ids_size());
    }
    if (plan_.abandon && !abandoned_ && !response_.finished() &&
        record_.chunk_s.size() >= static_cast<size_t>(plan_.after_chunks)) {
      // Abandoned after enough chunks; OnDone follows (CANCELLED, or OK if the server was done).
      abandoned_ = true;
      context_.TryCancel();
    }
    if (response_.finished()) {
      finished_ = true;
      if (response_.has_usage()) {
        record_.input_tokens = response_.usage().prompt_tokens();
        record_.output_tokens = response_.usage().completion_tokens();
      }
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    record_.e2e_s = since_start();
    if (abandoned_) {
      record_.ok = false;
      record_.disconnected = true;
    } else if (status.ok() && finished_) {
      record_.ok = true;
    } else if (status.ok()) {
      record_.error_kind = "protocol";
      record_.error = "the stream ended without a final response";
    } else {
      const grpc::StatusCode code = status.error_code();
      record_.error_kind = code == grpc::StatusCode::DEADLINE_EXCEEDED ? "timeout"
                           : code == grpc::StatusCode::UNAVAILABLE && record_.chunk_s.empty() &&
                                   status.error_message().find("onnect") != std::string::npos
                               ? "connection"
                               : "grpc_" + code_name(code);
      record_.error = status.error_message();
    }
    // The call's ClientContext is destroyed before `done` reports the last request: once it
    // has, the main thread may tear the client down and exit, and a context destroyed after
    // that (here, on gRPC's callback thread) unrefs call state that gRPC's shutdown already
    // freed ("ref_counted.h: assertion failed: prior > 0", seen as a SIGABRT at exit).
    Done done = std::move(done_);
    RequestRecord record = std::move(record_);
    delete this;
    done(std::move(record));
  }

 private:
  double since_start() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

  Done done_;
  grpc::ClientContext context_;
  pb::GenerateRequest request_;
  pb::GenerateResponse response_;
  RequestRecord record_;
  Clock::time_point start_;
  bool finished_ = false;
  DisconnectPlan plan_;
  bool abandoned_ = false;  // TryCancel was called on purpose
};

class GrpcClient final : public Client {
 public:
  explicit GrpcClient(const ClientOptions& o) : options_(o) {
    std::shared_ptr<grpc::ChannelCredentials> creds;
    if (o.grpc_tls) {
      grpc::SslCredentialsOptions ssl;
      if (!o.ca_cert.empty()) {
        std::ifstream in(o.ca_cert);
        SAMPAN_CHECK(in.good(), ErrorCode::kInvalidArgument, "--ca-cert: cannot read '{}'",
                     o.ca_cert);
        std::stringstream pem;
        pem << in.rdbuf();
        ssl.pem_root_certs = pem.str();
      }
      creds = grpc::SslCredentials(ssl);
    } else {
      creds = grpc::InsecureChannelCredentials();
    }
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    channel_ = grpc::CreateCustomChannel(o.grpc_target, creds, args);
    stub_ = pb::Generate::NewStub(channel_);
  }

  void check_reachable(double wait_s) override {
    SAMPAN_CHECK(channel_->WaitForConnected(deadline_in(wait_s)), ErrorCode::kUnavailable,
                 "cannot reach gRPC server {}: not connected after {:g} s (channel {})",
                 options_.grpc_target, wait_s, state_name(channel_->GetState(false)));
  }

  std::string discover_model(double) override { return ""; }

  void start(int64_t index, const Prompt& prompt, Clock::time_point bench_start,
             Done done) override {
    new GenerateCall(stub_.get(), options_, index, prompt, bench_start, std::move(done));
  }

 private:
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Generate::Stub> stub_;
};

}  // namespace

std::unique_ptr<Client> make_grpc_client(const ClientOptions& options) {
  return std::make_unique<GrpcClient>(options);
}

}  // namespace sampan::bench
