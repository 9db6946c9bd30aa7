#include "server/openai_api.h"

#include <array>
#include <ctime>
#include <mutex>
#include <optional>
#include <vector>

#include "server/gateway.h"
#include "server/request_parse.h"

namespace sampan::server {
namespace {

constexpr const char* kApi = "openai";

// Token strings may be partial UTF-8 (byte-fallback pieces): replace instead of throwing.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse(const std::string& data) { return "data: " + data + "\n\n"; }

Json usage_json(const runtime::EngineUsage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
}

Json utf8_bytes(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// One generation request from submit to its final event. Shared by the handler (until the
// stream is open), the engine thread (events) and the connection (on_close).
class Call {
 public:
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  int32_t logprobs = -1;  // completions: -1 none; chat: -1 none, else top_logprobs
  std::string id;
  std::string model;
  int64_t created = 0;
  const tok::Tokenizer* tokenizer = nullptr;
  ServeMetrics* metrics = nullptr;
  std::shared_ptr<ResponseWriter> writer;

  // Engine thread.
  void on_event(const runtime::EngineEvent& ev) {
    metrics->observe_token(ev, clock_);
    if (stream) {
      stream_event(ev);
    } else {
      collect(ev);
      if (ev.finished) finish_whole(ev);
    }
    if (ev.finished) metrics->generation_done(ev);
  }

  // Handler thread, after submit() returned: opens the stream and flushes what the engine
  // produced meanwhile.
  void open_stream() {
    std::lock_guard<std::mutex> lock(mu_);
    writer->start_stream(200, "text/event-stream",
                         {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    if (chat) writer->write(sse(dump(chunk(Json{{"role", "assistant"}, {"content", ""}}))));
    for (std::string& c : early_) writer->write(std::move(c));
    early_.clear();
    if (end_pending_) end_locked();
    opened_ = true;
  }

 private:
  Json token_logprob_chat(int32_t token, const runtime::SampleResult& s) const {
    Json top = Json::array();
    for (const runtime::TokenLogprob& t : s.top) {
      const std::string text = token_string(t.id);
      top.push_back({{"token", text}, {"logprob", t.logprob}, {"bytes", utf8_bytes(text)}});
    }
    const std::string text = token_string(token);
    return Json{{"token", text}, {"logprob", s.logprob}, {"bytes", utf8_bytes(text)},
                {"top_logprobs", std::move(top)}};
  }

  // The completion API's parallel arrays, for the tokens in `ids`.
  void add_completion_logprob(Json& lp, int32_t token, const runtime::SampleResult& s) {
    const std::string text = token_string(token);
    Json top = Json::object();
    top[text] = s.logprob;
    for (const runtime::TokenLogprob& t : s.top) top[token_string(t.id)] = t.logprob;
    lp["tokens"].push_back(text);
    lp["token_logprobs"].push_back(s.logprob);
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(text.size());
  }

  static Json empty_completion_logprobs() {
    return Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()},
                {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
  }

  std::string token_string(int32_t id) const {
    const std::array<int32_t, 1> one{id};
    return tokenizer->decode(one, false);
  }

  Json chunk(Json delta_or_text, const char* finish = nullptr, Json lp = nullptr) const {
    Json choice = Json::object();
    choice["index"] = 0;
    if (chat) choice["delta"] = std::move(delta_or_text);
    else choice["text"] = std::move(delta_or_text);
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = finish ? Json(finish) : Json(nullptr);
    Json j{{"id", id},
           {"object", chat ? "chat.completion.chunk" : "text_completion"},
           {"created", created},
           {"model", model},
           {"choices", Json::array({std::move(choice)})}};
    if (include_usage) j["usage"] = nullptr;
    return j;
  }

  // Why a finished request failed, if it did.
  std::optional<Error> failure(const runtime::EngineEvent& ev) const {
    if (!ev.finished) return std::nullopt;
    return finish_error(ev, writer->closed() ? CancelCause::kClient : CancelCause::kServer);
  }

  void stream_event(const runtime::EngineEvent& ev) {
    std::vector<std::string> out;
    if (const std::optional<Error> e = failure(ev)) {
      status_ = http_status(e->code());
      out.push_back(sse(error_json(e->what(), error_type(status_), e->field(), status_)));
      out.push_back(sse("[DONE]"));
    } else {
      Json lp = nullptr;
      if (ev.token >= 0 && logprobs >= 0) {
        if (chat) {
          lp = Json{{"content", Json::array({token_logprob_chat(ev.token, ev.sample)})}};
        } else {
          lp = empty_completion_logprobs();
          add_completion_logprob(lp, ev.token, ev.sample);
        }
      }
      const char* fin = ev.finished ? finish_reason(ev.finish) : nullptr;
      if (!ev.text.empty() || !lp.is_null() || fin) {
        Json delta = chat ? (ev.text.empty() ? Json::object() : Json{{"content", ev.text}})
                          : Json(ev.text);
        out.push_back(sse(dump(chunk(std::move(delta), fin, std::move(lp)))));
      }
      if (ev.finished && include_usage) {
        Json u = chunk(chat ? Json::object() : Json(""));
        u["choices"] = Json::array();
        u["usage"] = usage_json(ev.usage);
        out.push_back(sse(dump(u)));
      }
      if (ev.finished) out.push_back(sse("[DONE]"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!opened_) {
      for (std::string& c : out) early_.push_back(std::move(c));
      end_pending_ = ev.finished;
      return;
    }
    for (std::string& c : out) writer->write(std::move(c));
    if (ev.finished) end_locked();
  }

  void end_locked() {
    // A client that went away first counts as cancelled. A stream that failed after its 200
    // header counts with the status a whole response would have had.
    const int code = writer->closed() ? http_status(ErrorCode::kCancelled) : status_;
    writer->end();
    metrics->request_done(kApi, code);
  }

  void collect(const runtime::EngineEvent& ev) {
    text_ += ev.text;
    if (ev.token < 0 || logprobs < 0) return;
    if (chat) {
      if (lp_.is_null()) lp_ = Json{{"content", Json::array()}};
      lp_["content"].push_back(token_logprob_chat(ev.token, ev.sample));
    } else {
      if (lp_.is_null()) lp_ = empty_completion_logprobs();
      add_completion_logprob(lp_, ev.token, ev.sample);
    }
  }

  void finish_whole(const runtime::EngineEvent& ev) {
    if (const std::optional<Error> e = failure(ev)) {
      send_error(*writer, *metrics, kApi, *e);
      return;
    }
    if (logprobs >= 0 && lp_.is_null())
      lp_ = chat ? Json{{"content", Json::array()}} : empty_completion_logprobs();
    Json choice = Json::object();
    choice["index"] = 0;
    if (chat) choice["message"] = Json{{"role", "assistant"}, {"content", text_}};
    else choice["text"] = text_;
    choice["logprobs"] = lp_;
    choice["finish_reason"] = finish_reason(ev.finish);
    const Json body{{"id", id},
                    {"object", chat ? "chat.completion" : "text_completion"},
                    {"created", created},
                    {"model", model},
                    {"choices", Json::array({std::move(choice)})},
                    {"usage", usage_json(ev.usage)}};
    writer->respond(200, dump(body));
    metrics->request_done(kApi, 200);
  }

  // Engine thread only.
  std::string text_;
  Json lp_;
  int64_t text_offset_ = 0;
  TokenClock clock_;
  int status_ = 200;
  // Guarded by mu_: hand-off between the handler and the engine thread.
  std::mutex mu_;
  bool opened_ = false;
  std::vector<std::string> early_;
  bool end_pending_ = false;
};

// Submits the call's request; throws Error (naming the field at fault) before anything is
// answered, which the router sends.
void submit_call(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer, ModelHost& host,
                 const std::shared_ptr<runtime::Engine>& engine, std::shared_ptr<Call> call,
                 std::vector<int32_t> prompt, const SamplingFields& fields,
                 const char* prompt_field, int32_t lora) {
  runtime::EngineRequest er =
      engine_request(host, *engine, req.request_id, std::move(prompt), fields, prompt_field);
  er.lora = lora;
  call->created = static_cast<int64_t>(std::time(nullptr));
  // Responses name what the client asked for: the base, or the adapter it picked.
  call->model = host.model_name(lora);
  call->tokenizer = &engine->tokenizer();
  call->writer = writer;
  const uint64_t handle =
      engine->submit(std::move(er), [call](const runtime::EngineEvent& ev) { call->on_event(ev); });
  std::weak_ptr<runtime::Engine> weak = engine;
  writer->on_close([weak, handle] {
    if (auto e = weak.lock()) e->cancel(handle);
  });
  if (writer->closed()) engine->cancel(handle);
  if (call->stream) call->open_stream();
}

}  // namespace

void send_error(ResponseWriter& writer, ServeMetrics& metrics, const char* api, const Error& e) {
  const int status = http_status(e.code());
  writer.respond(status, error_json(e.what(), error_type(status), e.field(), status));
  metrics.request_done(api, status);
}

void handle_completions(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                        ModelHost& host, ServeMetrics& metrics) {
  const CompletionRequest cr = parse_completion_request(parse_json_object(req.body));
  int32_t lora = -1;
  const auto engine = admit(host, cr.model, "model", &lora);
  auto call = std::make_shared<Call>();
  call->id = "cmpl-" + req.request_id;
  call->stream = cr.stream;
  call->include_usage = cr.stream && cr.include_usage;
  call->logprobs = cr.logprobs;
  call->metrics = &metrics;
  std::vector<int32_t> prompt =
      cr.prompt_text ? engine->tokenizer().encode(*cr.prompt_text, /*add_special=*/true)
                     : cr.prompt_ids;
  submit_call(req, std::move(writer), host, engine, std::move(call), std::move(prompt), cr.fields,
              "prompt", lora);
}

void handle_chat_completions(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                             ModelHost& host, ServeMetrics& metrics) {
  const ChatRequest cr = parse_chat_request(parse_json_object(req.body));
  int32_t lora = -1;
  const auto engine = admit(host, cr.model, "model", &lora);
  std::vector<int32_t> prompt =
      encode_chat(host, cr.messages, cr.tools, "messages", "use /v1/completions");
  auto call = std::make_shared<Call>();
  call->chat = true;
  call->id = "chatcmpl-" + req.request_id;
  call->stream = cr.stream;
  call->include_usage = cr.stream && cr.include_usage;
  call->logprobs = cr.logprobs ? cr.top_logprobs : -1;
  call->metrics = &metrics;
  submit_call(req, std::move(writer), host, engine, std::move(call), std::move(prompt), cr.fields,
              "messages", lora);
}

void handle_models(const HttpRequest&, std::shared_ptr<ResponseWriter> writer, ModelHost& host,
                   ServeMetrics& metrics) {
  const auto created = static_cast<int64_t>(std::time(nullptr));
  const auto engine = host.engine();
  // The base, then each LoRA adapter with the base as its parent (as vLLM lists them).
  Json data = Json::array();
  auto entry = [&](const std::string& id, const std::string& parent) {
    Json m{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "sampan"}};
    if (!parent.empty()) m["parent"] = parent;
    if (engine) m["max_model_len"] = engine->max_model_len();
    data.push_back(std::move(m));
  };
  entry(host.name(), "");
  for (const std::string& a : host.adapters()) entry(a, host.name());
  const Json body{{"object", "list"}, {"data", std::move(data)}};
  writer->respond(200, dump(body));
  metrics.request_done(kApi, 200);
}

}  // namespace sampan::server
