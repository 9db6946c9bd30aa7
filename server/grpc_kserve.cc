// inference.GRPCInferenceService (KServe v2 + Triton's ModelStreamInfer) for the served LLM,
// with the tensor convention of Triton's vLLM backend (see grpc_server.h). ModelInfer answers
// once the whole output is generated; ModelStreamInfer multiplexes any number of requests on
// one stream, one response per token when the request's "stream" input is true.
#include <fmt/format.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>

#include "engine/core/log.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/grpc_common.h"
#include "server/kserve_decode.h"
#include "server/request_parse.h"

namespace sampan::server::grpc_detail {
namespace {

namespace pb = ::inference;

// ---- building responses ------------------------------------------------------------------

// The finished output of one request, or one streamed piece of it.
struct Piece {
  std::string text;
  std::vector<int32_t> ids;
  const runtime::EngineEvent* final_event = nullptr;  // set on the last response
};

pb::ModelInferResponse make_response(const std::string& model, const KserveInferRequest& spec,
                                     const Piece& piece) {
  pb::ModelInferResponse r;
  r.set_model_name(valid_utf8(model));
  r.set_model_version(kKserveModelVersion);
  r.set_id(spec.id);
  auto wanted = [&](const char* n) {
    return spec.outputs.empty() ||
           std::find(spec.outputs.begin(), spec.outputs.end(), n) != spec.outputs.end();
  };
  // Raw contents for every output, as tritonclient's as_numpy() reads them.
  if (wanted("text_output")) {
    auto* o = r.add_outputs();
    o->set_name("text_output");
    o->set_datatype("BYTES");
    o->add_shape(1);
    std::string* raw = r.add_raw_output_contents();
    const auto len = static_cast<uint32_t>(piece.text.size());
    raw->append(reinterpret_cast<const char*>(&len), 4);
    raw->append(piece.text);
  }
  if (wanted("output_ids")) {
    auto* o = r.add_outputs();
    o->set_name("output_ids");
    o->set_datatype("INT32");
    o->add_shape(static_cast<int64_t>(piece.ids.size()));
    std::string* raw = r.add_raw_output_contents();
    if (!piece.ids.empty()) {
      raw->assign(reinterpret_cast<const char*>(piece.ids.data()),
                  piece.ids.size() * sizeof(int32_t));
    }
  }
  auto& params = *r.mutable_parameters();
  params["triton_final_response"].set_bool_param(piece.final_event != nullptr);
  if (const auto* ev = piece.final_event) {
    // A fixed ASCII name; text_output is BYTES (raw contents), not a string field.
    params["finish_reason"].set_string_param(finish_reason(ev->finish));
    params["prompt_tokens"].set_int64_param(ev->usage.prompt_tokens);
    params["completion_tokens"].set_int64_param(ev->usage.completion_tokens);
    params["cached_prompt_tokens"].set_int64_param(ev->usage.cached_prompt_tokens);
  }
  return r;
}

// ---- ModelInfer ----------------------------------------------------------------------------

class InferCall final : public grpc::ServerUnaryReactor {
 public:
  InferCall(ServiceContext& svc, grpc::CallbackServerContext* ctx,
            const pb::ModelInferRequest& request, pb::ModelInferResponse* response)
      : svc_(svc), ctx_(ctx), response_(response) {
    grpc::Status st;
    try {
      st = start(request);
    } catch (...) {
      st = status_from_current_exception();
    }
    if (!st.ok()) {
      // Nothing was submitted: no engine event will come.
      record_rpc(svc_, "ModelInfer", id_, st);
      Finish(st);
    }
  }

  void OnCancel() override {
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancel = submitted_ && !final_seen_;
    }
    // The engine answers with a final kCancelled event at its next step, which finishes us.
    // Never called with mu_ held: the engine may hold its own lock while calling on_event().
    if (cancel) engine_->cancel(handle_);
  }

  void OnDone() override { delete this; }

 private:
  grpc::Status start(const pb::ModelInferRequest& request) {
    id_ = request_id_or_new(svc_, request.id());
    grpc::Status st = check_auth(svc_, ctx_);
    if (!st.ok()) return st;
    spec_ = parse_kserve_proto(request);
    if (spec_.stream) {
      throw RequestError("stream", "input 'stream': streaming needs ModelStreamInfer; "
                                   "ModelInfer returns the whole output");
    }
    int32_t lora = -1;
    engine_ = admit(svc_.host, request.model_name(), "model_name", &lora);
    runtime::EngineRequest er = kserve_engine_request(svc_.host, *engine_, spec_, id_);
    er.lora = lora;
    model_name_ = svc_.host.model_name(lora);
    er.timeout_s = request_timeout_s(ctx_, engine_->options());
    const uint64_t handle =
        engine_->submit(std::move(er), [this](const runtime::EngineEvent& ev) { on_event(ev); });
    // OnCancel cannot run yet (the reactor is not returned to gRPC), but it reads these later
    // from another thread.
    std::lock_guard<std::mutex> lock(mu_);
    handle_ = handle;
    submitted_ = true;
    return grpc::Status::OK;
  }

  // Engine thread.
  void on_event(const runtime::EngineEvent& ev) {
    svc_.metrics.observe_token(ev, clock_);
    if (ev.token >= 0) piece_.ids.push_back(ev.token);
    piece_.text += ev.text;
    if (!ev.finished) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      final_seen_ = true;
    }
    grpc::Status st = status_from_final(ev, ctx_);
    if (st.ok()) {
      piece_.final_event = &ev;
      *response_ = make_response(model_name_, spec_, piece_);
    }
    record_rpc(svc_, "ModelInfer", id_, st);
    svc_.metrics.generation_done(ev);
    Finish(st);  // `this` may be gone after this
  }

  ServiceContext& svc_;
  grpc::CallbackServerContext* ctx_;
  pb::ModelInferResponse* response_;
  std::string id_;
  std::shared_ptr<runtime::Engine> engine_;
  KserveInferRequest spec_;
  std::string model_name_;  // what the response names: the base or the adapter asked for
  Piece piece_;       // engine thread only
  TokenClock clock_;  // engine thread only

  std::mutex mu_;
  uint64_t handle_ = 0;
  bool submitted_ = false;
  bool final_seen_ = false;
};

// ---- ModelInfer on a classic (tensor) model ----------------------------------------------------

// Decodes and checks the request on gRPC's thread, runs it on the tensor session and answers
// from the session's worker. Outputs always go out as raw_output_contents, as Triton sends them
// and tritonclient's as_numpy() reads them.
class TensorInferCall final : public grpc::ServerUnaryReactor {
 public:
  TensorInferCall(ServiceContext& svc, grpc::CallbackServerContext* ctx,
                  const pb::ModelInferRequest& request, pb::ModelInferResponse* response)
      : svc_(svc), ctx_(ctx), response_(response) {
    grpc::Status st;
    try {
      st = start(request);
    } catch (...) {
      st = status_from_current_exception();
    }
    if (!st.ok()) {
      record_rpc(svc_, "ModelInfer", id_, st);
      Finish(st);
    }
  }

  void OnDone() override { delete this; }

 private:
  grpc::Status start(const pb::ModelInferRequest& request) {
    id_ = request_id_or_new(svc_, request.id());
    grpc::Status st = check_auth(svc_, ctx_);
    if (!st.ok()) return st;
    std::shared_ptr<runtime::TensorSession> session =
        admit_tensor(svc_.host, request.model_name(), "model_name");
    SAMPAN_CHECK(session != nullptr, ErrorCode::kInternal, "no tensor model is served");
    KserveTensorRequest in = parse_kserve_tensor_proto(request);
    outputs_ = kserve_tensor_outputs(*session, in);
    for (const models::TensorSpec& s : session->signature().outputs) {
      names_.push_back(s.api_name);
      datatypes_.push_back(kserve_spec_datatype(s));
    }
    request_id_ = request.id();
    // Nothing of `this` may be touched after submit(): the answer may come at once.
    session->submit(kserve_tensor_feeds(*session, in),
                    [this](std::vector<Tensor> outputs, std::optional<Error> error) {
                      done(outputs, error);
                    });
    return grpc::Status::OK;
  }

  // The session's worker thread.
  void done(const std::vector<Tensor>& results, const std::optional<Error>& error) {
    grpc::Status st = grpc::Status::OK;
    if (error) {
      st = status_from_error(*error);
    } else {
      try {
        response_->set_model_name(valid_utf8(svc_.host.name()));
        response_->set_model_version(kKserveModelVersion);
        response_->set_id(request_id_);
        for (const TensorOutputChoice& c : outputs_) {
          const Tensor& t = results.at(c.index);
          auto* o = response_->add_outputs();
          o->set_name(valid_utf8(names_[c.index]));
          o->set_datatype(datatypes_[c.index]);
          for (int64_t d : t.shape()) o->add_shape(d);
          std::string* raw = response_->add_raw_output_contents();
          if (t.nbytes() > 0) raw->assign(static_cast<const char*>(t.raw()), t.nbytes());
        }
      } catch (...) {
        response_->Clear();
        st = status_from_current_exception();
      }
    }
    record_rpc(svc_, "ModelInfer", id_, st);
    Finish(st);  // `this` may be gone after this
  }

  ServiceContext& svc_;
  grpc::CallbackServerContext* ctx_;
  pb::ModelInferResponse* response_;
  std::string id_, request_id_;
  std::vector<TensorOutputChoice> outputs_;
  std::vector<std::string> names_, datatypes_;
};

// ---- ModelStreamInfer ----------------------------------------------------------------------

const char* status_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    default: return "INTERNAL";
  }
}

// Any number of requests on one stream, generated concurrently; their responses interleave.
// A failed request gets a response with error_message and the stream stays open (Triton's
// convention). The call finishes once the client has closed its side, every request has had
// its final engine event and every response is written — so the reactor outlives every engine
// callback.
class StreamInferCall final
    : public grpc::ServerBidiReactor<pb::ModelInferRequest, pb::ModelStreamInferResponse> {
 public:
  StreamInferCall(ServiceContext& svc, grpc::CallbackServerContext* ctx) : svc_(svc), ctx_(ctx) {
    grpc::Status st = check_auth(svc_, ctx_);
    if (!st.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        finished_ = true;
      }
      record_rpc(svc_, "ModelStreamInfer", "-", st);
      Finish(st);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (ok) start_job(request_);
    bool again = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      again = ok && !broken_;
      if (!again) reads_done_ = true;
    }
    if (again) {
      StartRead(&request_);
    } else {
      pump();
    }
  }

  void OnWriteDone(bool ok) override {
    std::vector<Submitted> to_cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok && !broken_) to_cancel = break_locked();
    }
    for (auto& s : to_cancel) s.engine->cancel(s.handle);
    pump();
  }

  void OnCancel() override {
    std::vector<Submitted> to_cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_) to_cancel = break_locked();
    }
    for (auto& s : to_cancel) s.engine->cancel(s.handle);
    pump();
  }

  void OnDone() override { delete this; }

 private:
  struct Job {
    std::string id;
    KserveInferRequest spec;
    std::string model_name;  // the base or the adapter the request named
    std::shared_ptr<runtime::Engine> engine;
    uint64_t handle = 0;
    bool submitted = false;
    Piece piece;  // non-streaming: the output so far
    TokenClock clock;
  };
  struct Submitted {
    std::shared_ptr<runtime::Engine> engine;
    uint64_t handle;
  };

  // Under mu_: the stream is gone; returns the engine requests to cancel (outside mu_).
  std::vector<Submitted> break_locked() {
    broken_ = true;
    pending_.clear();
    std::vector<Submitted> out;
    for (auto& [key, job] : jobs_) {
      if (job.submitted) out.push_back({job.engine, job.handle});
    }
    return out;
  }

  void start_job(const pb::ModelInferRequest& request) {
    const std::string id = request_id_or_new(svc_, request.id());
    try {
      if (svc_.host.tensor_session()) {
        throw Error(ErrorCode::kInvalidArgument, "model_name",
                    tensor_model_message(svc_.host) + " (ModelStreamInfer serves language models)");
      }
      KserveInferRequest spec = parse_kserve_proto(request);
      int32_t lora = -1;
      auto engine = admit(svc_.host, request.model_name(), "model_name", &lora);
      runtime::EngineRequest er = kserve_engine_request(svc_.host, *engine, spec, id);
      er.lora = lora;
      er.timeout_s = request_timeout_s(ctx_, engine->options());
      uint64_t key = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        key = next_key_++;
        Job& job = jobs_[key];
        job.id = id;
        job.spec = std::move(spec);
        job.model_name = svc_.host.model_name(lora);
        job.engine = engine;
      }
      uint64_t handle = 0;
      try {
        handle = engine->submit(std::move(er),
                                [this, key](const runtime::EngineEvent& ev) { on_event(key, ev); });
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          jobs_.erase(key);
        }
        throw;
      }
      bool cancel_now = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = jobs_.find(key);  // gone already if it finished at once
        if (it != jobs_.end()) {
          it->second.handle = handle;
          it->second.submitted = true;
          cancel_now = broken_;
        }
      }
      if (cancel_now) engine->cancel(handle);
    } catch (...) {
      fail_job(request, id, status_from_current_exception());
    }
  }

  void fail_job(const pb::ModelInferRequest& request, const std::string& id,
                const grpc::Status& st) {
    record_rpc(svc_, "ModelStreamInfer", id, st);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_) push_error_locked(request.model_name(), request.id(), st);
    }
    pump();
  }

  void push_error_locked(const std::string& model, const std::string& id, const grpc::Status& st) {
    pb::ModelStreamInferResponse& r = pending_.emplace_back();
    r.set_error_message(valid_utf8(fmt::format("{}: {}", status_code_name(st.error_code()),
                                               st.error_message())));
    // Lets a client match the error to its request.
    r.mutable_infer_response()->set_model_name(valid_utf8(model));
    r.mutable_infer_response()->set_id(id);
  }

  // Engine thread.
  void on_event(uint64_t key, const runtime::EngineEvent& ev) {
    std::optional<grpc::Status> final_status;
    std::string id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = jobs_.find(key);
      if (it == jobs_.end()) return;
      Job& job = it->second;
      svc_.metrics.observe_token(ev, job.clock);
      Piece piece;  // what this event adds
      if (ev.token >= 0) piece.ids.push_back(ev.token);
      piece.text = ev.text;
      if (!job.spec.stream) {
        job.piece.ids.insert(job.piece.ids.end(), piece.ids.begin(), piece.ids.end());
        job.piece.text += piece.text;
      } else if (!ev.finished && !broken_ && (ev.token >= 0 || !ev.text.empty())) {
        *pending_.emplace_back().mutable_infer_response() =
            make_response(job.model_name, job.spec, piece);
      }
      if (ev.finished) {
        final_status = status_from_final(ev, ctx_);
        if (!broken_ && final_status->ok()) {
          Piece& last = job.spec.stream ? piece : job.piece;
          last.final_event = &ev;
          *pending_.emplace_back().mutable_infer_response() =
              make_response(job.model_name, job.spec, last);
        } else if (!broken_) {
          push_error_locked(job.model_name, job.spec.id, *final_status);
        }
        id = job.id;
        jobs_.erase(it);
      }
    }
    if (final_status) {
      record_rpc(svc_, "ModelStreamInfer", id, *final_status);
      svc_.metrics.generation_done(ev);
    }
    pump();  // may finish the call: `this` must not be touched after it
  }

  // Starts the next write, or finishes the call when nothing is left. Never holds mu_ while
  // calling into gRPC.
  void pump() {
    std::unique_lock<std::mutex> lock(mu_);
    if (finished_ || writing_) return;
    if (!broken_ && !pending_.empty()) {
      current_ = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
      lock.unlock();
      StartWrite(&current_);
      return;
    }
    if (!reads_done_ || !jobs_.empty()) return;
    finished_ = true;
    const bool broken = broken_;
    lock.unlock();
    Finish(broken ? grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled")
                  : grpc::Status::OK);
  }

  ServiceContext& svc_;
  grpc::CallbackServerContext* ctx_;
  pb::ModelInferRequest request_;  // the read in flight; used only by OnReadDone

  std::mutex mu_;
  std::map<uint64_t, Job> jobs_;
  uint64_t next_key_ = 0;
  std::deque<pb::ModelStreamInferResponse> pending_;
  pb::ModelStreamInferResponse current_;  // the write in flight
  bool writing_ = false;
  bool reads_done_ = false;
  bool broken_ = false;    // cancelled or a write failed: nothing more is written
  bool finished_ = false;  // Finish() called
};

// ---- the service: health, metadata, infer -------------------------------------------------

class KserveService final : public pb::GRPCInferenceService::CallbackService {
 public:
  explicit KserveService(ServiceContext& svc) : svc_(svc) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                       const pb::ServerLiveRequest*,
                                       pb::ServerLiveResponse* response) override {
    response->set_live(true);
    return done(ctx, "ServerLive", grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                        const pb::ServerReadyRequest*,
                                        pb::ServerReadyResponse* response) override {
    response->set_ready(svc_.host.ready());
    return done(ctx, "ServerReady", grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                       const pb::ModelReadyRequest* request,
                                       pb::ModelReadyResponse* response) override {
    grpc::Status st = check_model(ctx, request->name(), request->version());
    if (st.ok()) response->set_ready(svc_.host.ready());
    return done(ctx, "ModelReady", st);
  }

  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const pb::ServerMetadataRequest*,
                                           pb::ServerMetadataResponse* response) override {
    grpc::Status st = check_auth(svc_, ctx);
    if (st.ok()) {
      response->set_name("sampan");
      response->set_version(kKserveServerVersion);
      // Beyond the core protocol we serve model metadata over gRPC and REST, and Triton's
      // decoupled streaming (ModelStreamInfer).
      response->add_extensions("model_metadata");
      response->add_extensions("streaming");
    }
    return done(ctx, "ServerMetadata", st);
  }

  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const pb::ModelMetadataRequest* request,
                                          pb::ModelMetadataResponse* response) override {
    grpc::Status st = check_model(ctx, request->name(), request->version());
    if (st.ok()) {
      if (auto session = svc_.host.tensor_session()) {
        response->set_name(valid_utf8(svc_.host.name()));
        response->add_versions(kKserveModelVersion);
        response->set_platform(session->model().format);
        auto list = [](auto* out, const std::vector<models::TensorSpec>& specs) {
          for (const models::TensorSpec& s : specs) {
            auto* t = out->Add();
            t->set_name(valid_utf8(s.api_name));
            t->set_datatype(kserve_spec_datatype(s));
            for (int64_t d : kserve_shape(s)) t->add_shape(d);
          }
        };
        list(response->mutable_inputs(), session->signature().inputs);
        list(response->mutable_outputs(), session->signature().outputs);
        return done(ctx, "ModelMetadata", st);
      }
      response->set_name(valid_utf8(svc_.host.name()));
      response->add_versions(kKserveModelVersion);
      response->set_platform("sampan");
      auto tensor = [](auto* list, const char* name, const char* datatype, int64_t dim) {
        auto* t = list->Add();
        t->set_name(name);
        t->set_datatype(datatype);
        t->add_shape(dim);
      };
      tensor(response->mutable_inputs(), "text_input", "BYTES", 1);
      tensor(response->mutable_inputs(), "input_ids", "INT32", -1);
      tensor(response->mutable_inputs(), "max_tokens", "INT32", 1);
      tensor(response->mutable_inputs(), "stream", "BOOL", 1);
      tensor(response->mutable_inputs(), "sampling_parameters", "BYTES", 1);
      tensor(response->mutable_outputs(), "text_output", "BYTES", 1);
      tensor(response->mutable_outputs(), "output_ids", "INT32", -1);
    }
    return done(ctx, "ModelMetadata", st);
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const pb::ModelInferRequest* request,
                                       pb::ModelInferResponse* response) override {
    if (svc_.host.tensor_session()) return new TensorInferCall(svc_, ctx, *request, response);
    return new InferCall(svc_, ctx, *request, response);
  }

  grpc::ServerBidiReactor<pb::ModelInferRequest, pb::ModelStreamInferResponse>* ModelStreamInfer(
      grpc::CallbackServerContext* ctx) override {
    return new StreamInferCall(svc_, ctx);
  }

 private:
  grpc::Status check_model(grpc::CallbackServerContext* ctx, const std::string& name,
                           const std::string& version) {
    grpc::Status st = check_auth(svc_, ctx);
    if (!st.ok()) return st;
    try {
      check_kserve_model(svc_.host, name, version);
    } catch (...) {
      return status_from_current_exception();
    }
    return grpc::Status::OK;
  }

  grpc::ServerUnaryReactor* done(grpc::CallbackServerContext* ctx, const char* method,
                                 const grpc::Status& st) {
    record_rpc(svc_, method, "-", st);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(st);
    return reactor;
  }

  ServiceContext& svc_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_kserve_service(ServiceContext& svc) {
  return std::make_unique<KserveService>(svc);
}

}  // namespace sampan::server::grpc_detail
