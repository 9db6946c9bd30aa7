// sampan.v1.Generate: one server-streaming call per generation request. Engine events arrive on
// the engine thread and are queued on the call; one write is in flight at a time, the next
// starts from OnWriteDone. Tokens that pile up behind a slow client are merged into one
// response (the proto allows several tokens per response) so the queue stays short.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <mutex>
#include <optional>

#include "engine/core/log.h"
#include "engine/runtime/json_schema.h"
#include "engine/runtime/sampling_limits.h"
#include "proto/sampan_generate.grpc.pb.h"
#include "server/grpc_common.h"

namespace sampan::server::grpc_detail {
namespace {

namespace pb = ::sampan::v1;

[[noreturn]] void invalid(const char* field, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, field, message);
}

// The prompt of `in` as token ids; *field names where it came from.
std::vector<int32_t> encode_prompt(const ModelHost& host, const runtime::Engine& engine,
                                   const pb::GenerateRequest& in, std::string* field) {
  switch (in.prompt_case()) {
    case pb::GenerateRequest::kText:
      *field = "text";
      return engine.tokenizer().encode(in.text(), true);
    case pb::GenerateRequest::kTokenIds:
      *field = "token_ids";
      if (in.token_ids().ids().empty()) {
        invalid("token_ids", "token_ids: at least one id is required");
      }
      return {in.token_ids().ids().begin(), in.token_ids().ids().end()};
    case pb::GenerateRequest::kChat: {
      *field = "chat.messages";
      if (in.chat().messages().empty()) {
        invalid("chat.messages", "chat.messages: at least one message is required");
      }
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      for (const auto& m : in.chat().messages()) {
        if (m.role().empty()) {
          invalid("chat.messages.role", "chat.messages.role: must not be empty");
        }
        messages.push_back({{"role", m.role()}, {"content", m.content()}});
      }
      return encode_chat(host, messages, nullptr, "chat.messages", "send text or token_ids");
    }
    case pb::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  invalid("prompt", "prompt: one of text, token_ids or chat is required");
}

// The sampling and stopping fields of `in`, checked as every front end checks them
// (sampling_limits.h); needs no engine.
SamplingFields sampling_fields(const pb::GenerateRequest& in) {
  using runtime::SamplingParam;
  SamplingFields f;
  runtime::SamplingParams& s = f.sampling;
  const auto take = [](SamplingParam p, auto value, auto& out) {
    runtime::check_sampling_param(p, static_cast<double>(value));
    out = value;
  };
  if (in.has_temperature()) take(SamplingParam::kTemperature, in.temperature(), s.temperature);
  if (in.has_top_k()) take(SamplingParam::kTopK, in.top_k(), s.top_k);
  if (in.has_top_p()) take(SamplingParam::kTopP, in.top_p(), s.top_p);
  if (in.has_min_p()) take(SamplingParam::kMinP, in.min_p(), s.min_p);
  if (in.has_repetition_penalty()) {
    take(SamplingParam::kRepetitionPenalty, in.repetition_penalty(), s.repetition_penalty);
  }
  if (in.has_presence_penalty()) {
    take(SamplingParam::kPresencePenalty, in.presence_penalty(), s.presence_penalty);
  }
  if (in.has_frequency_penalty()) {
    take(SamplingParam::kFrequencyPenalty, in.frequency_penalty(), s.frequency_penalty);
  }
  if (in.has_seed()) s.seed = in.seed();
  for (const auto& [id, bias] : in.logit_bias()) {
    runtime::check_logit_bias_entry(id, bias, "logit_bias",
                                    "logit_bias[" + std::to_string(id) + "]");
    s.logit_bias.emplace_back(id, bias);
  }
  // The map's order is unspecified; ids ascending keep the request's parameters reproducible.
  std::sort(s.logit_bias.begin(), s.logit_bias.end());
  if (in.has_logprobs()) {
    runtime::check_sampling_param(SamplingParam::kTopLogprobs, in.logprobs(), "logprobs");
    s.top_logprobs = in.logprobs();
  }
  s.logprobs = in.has_logprobs();  // the responses carry logprobs only then
  if (in.has_max_tokens()) {
    if (in.max_tokens() < 1) {
      invalid("max_tokens",
              "max_tokens: must be >= 1 (got " + std::to_string(in.max_tokens()) + ")");
    }
    f.max_tokens = in.max_tokens();
  }
  for (const auto& stop : in.stop()) {
    if (stop.empty()) invalid("stop", "stop: stop strings must not be empty");
    f.stop.push_back(stop);
  }
  f.stop_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  f.ignore_eos = in.ignore_eos();
  f.json_object = in.json_object();
  if (!in.json_schema().empty()) {
    if (f.json_object) invalid("json_schema", "json_schema: not with json_object; choose one");
    try {
      f.grammar = runtime::compile_json_schema(in.json_schema(), "json_schema");
    } catch (const Error& e) {
      invalid("json_schema", e.what());
    }
  }
  return f;
}

class GenerateCall final : public grpc::ServerWriteReactor<pb::GenerateResponse> {
 public:
  GenerateCall(ServiceContext& svc, grpc::CallbackServerContext* ctx,
               const pb::GenerateRequest& request)
      : svc_(svc), ctx_(ctx), id_(request_id_or_new(svc, request.request_id())) {
    grpc::Status st;
    try {
      st = start(request);
    } catch (...) {
      st = status_from_current_exception();
    }
    if (!st.ok()) {
      // Nothing was submitted: no engine event will come.
      {
        std::lock_guard<std::mutex> lock(mu_);
        finished_ = true;
      }
      record_rpc(svc_, "Generate", id_, st);
      Finish(st);
    }
  }

  void OnWriteDone(bool ok) override {
    std::optional<uint64_t> to_cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok && !broken_) {
        // The stream is gone (client cancelled or the connection dropped).
        broken_ = true;
        pending_.clear();
        if (submitted_ && !final_status_) to_cancel = handle_;
      }
    }
    if (to_cancel) engine_->cancel(*to_cancel);
    pump();
  }

  void OnCancel() override {
    std::optional<uint64_t> to_cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      broken_ = true;
      pending_.clear();
      if (submitted_ && !final_status_) to_cancel = handle_;
    }
    // The engine answers with the final kCancelled event at its next step; pump() finishes the
    // call then, so the reactor outlives every engine callback.
    if (to_cancel) engine_->cancel(*to_cancel);
  }

  void OnDone() override { delete this; }

 private:
  grpc::Status start(const pb::GenerateRequest& request) {
    grpc::Status st = check_auth(svc_, ctx_);
    if (!st.ok()) return st;
    const SamplingFields fields = sampling_fields(request);
    if (request.has_prompt_logprobs()) {
      runtime::check_sampling_param(runtime::SamplingParam::kTopLogprobs,
                                    request.prompt_logprobs(), "prompt_logprobs");
    }
    int32_t lora = -1;
    engine_ = admit(svc_.host, request.model(), "model", &lora);
    std::string prompt_field;
    std::vector<int32_t> prompt = encode_prompt(svc_.host, *engine_, request, &prompt_field);
    runtime::EngineRequest er =
        engine_request(svc_.host, *engine_, id_, std::move(prompt), fields, prompt_field);
    er.lora = lora;
    want_logprobs_ = request.has_logprobs();
    if (request.has_prompt_logprobs()) er.prompt_logprobs = request.prompt_logprobs();
    er.timeout_s = request_timeout_s(ctx_, engine_->options());
    uint64_t handle =
        engine_->submit(std::move(er), [this](const runtime::EngineEvent& ev) { on_event(ev); });
    std::lock_guard<std::mutex> lock(mu_);
    handle_ = handle;
    submitted_ = true;
    return grpc::Status::OK;
  }

  // Engine thread.
  void on_event(const runtime::EngineEvent& ev) {
    svc_.metrics.observe_token(ev, clock_);
    // Its answer is counted later, once the writes are done (pump).
    if (ev.finished) svc_.metrics.generation_done(ev);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ev.finished) final_status_ = status_from_final(ev, ctx_);
      // A failed request reports its status only; its partial output would mislead.
      bool keep = !broken_ && (!ev.finished || final_status_->ok());
      if (keep && (ev.token >= 0 || !ev.text.empty() || ev.finished)) append(ev);
    }
    pump();  // may finish the call: `this` must not be touched after it
  }

  // A token's logprob and its alternatives (each named by its text alone).
  void add_logprob(const runtime::SampleResult& s, pb::TokenLogprob* lp) const {
    lp->set_token_id(s.id);
    lp->set_logprob(s.logprob);
    const auto& tok = engine_->tokenizer();
    for (const auto& alt : s.top) {
      pb::TopLogprob* t = lp->add_top();
      t->set_token_id(alt.id);
      t->set_logprob(alt.logprob);
      const int32_t one[1] = {alt.id};
      // A byte-fallback token alone (<0xE2>) decodes to a lone, invalid byte.
      t->set_token(valid_utf8(tok.decode(one)));
    }
  }

  // Under mu_.
  void append(const runtime::EngineEvent& ev) {
    if (pending_.empty() || pending_.back().finished()) pending_.emplace_back();
    pb::GenerateResponse& r = pending_.back();
    r.set_request_id(id_);
    for (const runtime::SampleResult& p : ev.prompt_logprobs) {
      add_logprob(p, r.add_prompt_logprobs());
    }
    if (ev.token >= 0) {
      r.add_token_ids(ev.token);
      if (want_logprobs_) add_logprob(ev.sample, r.add_logprobs());
    }
    // The stream decoder holds back an incomplete character, but text may still hold invalid
    // bytes (a byte-fallback token the model never completed, or the held bytes at the end).
    r.mutable_text()->append(valid_utf8(ev.text));
    if (ev.finished) {
      r.set_finished(true);
      r.set_finish_reason(finish_reason(ev.finish));  // a fixed ASCII name
      r.set_stop_matched(valid_utf8(ev.stop_matched));
      pb::Usage* u = r.mutable_usage();
      u->set_prompt_tokens(ev.usage.prompt_tokens);
      u->set_completion_tokens(ev.usage.completion_tokens);
      u->set_cached_prompt_tokens(ev.usage.cached_prompt_tokens);
      pb::Timings* t = r.mutable_timings();
      t->set_queue_s(ev.timings.queue_s);
      t->set_first_token_s(ev.timings.first_token_s);
      t->set_total_s(ev.timings.total_s);
    }
  }

  // Starts the next write, or finishes the call once the final event is in and everything
  // before it is written. Never holds mu_ while calling into gRPC.
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
    if (!final_status_) return;
    finished_ = true;
    grpc::Status st = broken_ && final_status_->ok()
                          ? grpc::Status(grpc::StatusCode::CANCELLED, "the client went away")
                          : *final_status_;
    lock.unlock();
    record_rpc(svc_, "Generate", id_, st);
    Finish(st);
  }

  ServiceContext& svc_;
  grpc::CallbackServerContext* ctx_;
  const std::string id_;
  std::shared_ptr<runtime::Engine> engine_;
  bool want_logprobs_ = false;
  TokenClock clock_;  // engine thread only

  std::mutex mu_;
  uint64_t handle_ = 0;
  bool submitted_ = false;
  std::deque<pb::GenerateResponse> pending_;
  pb::GenerateResponse current_;  // the write in flight
  bool writing_ = false;
  bool broken_ = false;    // cancelled or a write failed: nothing more is written
  bool finished_ = false;  // Finish() called
  std::optional<grpc::Status> final_status_;
};

class GenerateService final : public pb::Generate::CallbackService {
 public:
  explicit GenerateService(ServiceContext& svc) : svc_(svc) {}

  grpc::ServerWriteReactor<pb::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const pb::GenerateRequest* request) override {
    return new GenerateCall(svc_, ctx, *request);
  }

 private:
  ServiceContext& svc_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_generate_service(ServiceContext& svc) {
  return std::make_unique<GenerateService>(svc);
}

}  // namespace sampan::server::grpc_detail
