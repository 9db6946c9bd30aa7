#include "server/openai_api.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <ctime>
#include <mutex>
#include <string_view>
#include <vector>

#include "server/request_parse.h"

namespace sampan::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kApi = "openai";

// Token strings may be partial UTF-8 (byte-fallback pieces): replace instead of throwing.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse(const std::string& data) { return "data: " + data + "\n\n"; }

const char* finish_reason(runtime::EngineFinish f) {
  return f == runtime::EngineFinish::kStop ? "stop" : "length";
}

// Status and message of a final event that did not complete normally; 0 when it did.
int failed_status(const runtime::EngineEvent& ev, std::string* message) {
  switch (ev.finish) {
    case runtime::EngineFinish::kStop:
    case runtime::EngineFinish::kLength: return 0;
    case runtime::EngineFinish::kTimeout:
      *message = "the request exceeded its time limit";
      return 504;
    case runtime::EngineFinish::kCancelled:
      *message = "the request was cancelled (the server is shutting down)";
      return 503;
    case runtime::EngineFinish::kError:
      *message = "generation failed: " + (ev.error.empty() ? std::string("unknown error") : ev.error);
      return 500;
  }
  return 500;
}

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
    const auto now = Clock::now();
    if (ev.token >= 0) {
      if (have_last_) metrics->inter_token(std::chrono::duration<double>(now - last_).count());
      last_ = now;
      have_last_ = true;
    }
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

  void stream_event(const runtime::EngineEvent& ev) {
    std::vector<std::string> out;
    std::string message;
    const int failed = ev.finished ? failed_status(ev, &message) : 0;
    if (failed) {
      out.push_back(sse(error_json(message, error_type(failed), "", failed)));
      out.push_back(sse("[DONE]"));
      status_ = failed;
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
    // 499: the client went away first (nginx's "client closed request"). A stream that failed
    // after its 200 header counts with the status a whole response would have had.
    const int code = writer->closed() ? 499 : status_;
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
    std::string message;
    if (const int failed = failed_status(ev, &message)) {
      // 499: the client went away first (nginx's "client closed request"), so nobody reads it.
      const int code = ev.finish == runtime::EngineFinish::kCancelled && writer->closed() ? 499
                                                                                          : failed;
      writer->respond(failed, error_json(message, error_type(failed), "", failed));
      metrics->request_done(kApi, code);
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
  Clock::time_point last_;
  bool have_last_ = false;
  int status_ = 200;
  // Guarded by mu_: hand-off between the handler and the engine thread.
  std::mutex mu_;
  bool opened_ = false;
  std::vector<std::string> early_;
  bool end_pending_ = false;
};

struct Prepared {
  std::shared_ptr<runtime::Engine> engine;
  std::string model;
};

// The checks every generation route makes first: loaded, not draining, the right model.
// Returns false after answering.
bool admit(const std::string& model, ResponseWriter& writer, ModelHost& host,
           ServeMetrics& metrics, Prepared* p) {
  p->engine = host.engine();
  if (!p->engine) {
    send_error(writer, metrics, kApi, 503, "the model is still loading", "");
    return false;
  }
  if (host.draining()) {
    send_error(writer, metrics, kApi, 503, "the server is shutting down", "");
    return false;
  }
  if (!model.empty() && model != host.name()) {
    send_error(writer, metrics, kApi, 404,
               fmt::format("model '{}' does not exist; this server serves '{}'", model,
                           host.name()),
               "model");
    return false;
  }
  p->model = host.name();
  return true;
}

void run_call(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
              ModelHost& host, ServeMetrics& metrics, const Prepared& p,
              std::shared_ptr<Call> call, std::vector<int32_t> prompt,
              const SamplingFields& fields, const char* prompt_field) {
  const int64_t max_len = p.engine->max_model_len();
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= max_len) {
    send_error(*writer, metrics, kApi, 400,
               fmt::format("'{}' {} {} tokens; this model's context is {} tokens (the prompt "
                           "and at least one generated token must fit)",
                           prompt_field,
                           std::string_view(prompt_field) == "messages" ? "render to" : "has",
                           n_prompt, max_len),
               prompt_field);
    return;
  }
  runtime::EngineRequest er;
  er.id = req.request_id;
  er.prompt = std::move(prompt);
  fields.apply_to(er);
  er.max_tokens = effective_max_tokens(fields.max_tokens, host.default_max_tokens(), n_prompt,
                                       max_len);
  call->created = static_cast<int64_t>(std::time(nullptr));
  call->model = p.model;
  call->tokenizer = &p.engine->tokenizer();
  call->metrics = &metrics;
  call->writer = writer;

  uint64_t handle = 0;
  try {
    handle = p.engine->submit(std::move(er),
                              [call](const runtime::EngineEvent& ev) { call->on_event(ev); });
  } catch (const Error& e) {
    const int status = http_status(e.code());
    std::string param = status == 400 ? field_in_message(e.what()) : "";
    if (param == "prompt") param = prompt_field;
    send_error(*writer, metrics, kApi, status, e.what(), param);
    return;
  }
  std::weak_ptr<runtime::Engine> weak = p.engine;
  writer->on_close([weak, handle] {
    if (auto e = weak.lock()) e->cancel(handle);
  });
  if (writer->closed()) p.engine->cancel(handle);
  if (call->stream) call->open_stream();
}

std::vector<int32_t> encode_prompt(const runtime::Engine& engine, const std::string& text) {
  return engine.tokenizer().encode(text, /*add_special=*/true);
}

}  // namespace

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return 400;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kResourceExhausted: return 429;
    case ErrorCode::kUnavailable:
    case ErrorCode::kCancelled: return 503;
    case ErrorCode::kDeadlineExceeded: return 504;
    case ErrorCode::kInvalidModel:
    case ErrorCode::kUnsupported:
    case ErrorCode::kOutOfMemory:
    case ErrorCode::kIo:
    case ErrorCode::kInternal: return 500;
  }
  return 500;
}

const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "method_not_allowed";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    case 504: return "timeout";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string field_in_message(const std::string& message) {
  // Longest names first: "top_logprobs" must not be reported as "top_p"-like prefixes.
  static const char* const kFields[] = {
      "repetition_penalty", "presence_penalty", "frequency_penalty", "top_logprobs",
      "max_tokens",         "temperature",      "stop_ids",          "min_p",
      "top_p",              "top_k",            "seed",              "prompt"};
  size_t best = std::string::npos;
  std::string found;
  for (const char* f : kFields) {
    const size_t at = message.find(f);
    if (at != std::string::npos && at < best) {
      best = at;
      found = f;
    }
  }
  if (found == "stop_ids") found = "stop";
  return found;
}

void send_error(ResponseWriter& writer, ServeMetrics& metrics, const char* api, int status,
                const std::string& message, const std::string& param) {
  writer.respond(status, error_json(message, error_type(status), param, status));
  metrics.request_done(api, status);
}

void handle_completions(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                        ModelHost& host, ServeMetrics& metrics) {
  const Json body = parse_json_object(req.body);
  const CompletionRequest cr = parse_completion_request(body);
  Prepared p;
  if (!admit(cr.model, *writer, host, metrics, &p)) return;
  auto call = std::make_shared<Call>();
  call->id = "cmpl-" + req.request_id;
  call->stream = cr.stream;
  call->include_usage = cr.stream && cr.include_usage;
  call->logprobs = cr.logprobs;
  std::vector<int32_t> prompt =
      cr.prompt_text ? encode_prompt(*p.engine, *cr.prompt_text) : cr.prompt_ids;
  run_call(req, std::move(writer), host, metrics, p, std::move(call), std::move(prompt),
           cr.fields, "prompt");
}

void handle_chat_completions(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                             ModelHost& host, ServeMetrics& metrics) {
  const Json body = parse_json_object(req.body);
  const ChatRequest cr = parse_chat_request(body);
  Prepared p;
  if (!admit(cr.model, *writer, host, metrics, &p)) return;
  const auto chat = host.chat();
  if (!chat) {
    send_error(*writer, metrics, kApi, 400,
               fmt::format("model '{}' has no chat template; use /v1/completions", host.name()),
               "messages");
    return;
  }
  std::vector<int32_t> prompt;
  try {
    prompt = chat->encode(cr.messages, /*add_generation_prompt=*/true, cr.tools);
  } catch (const Error& e) {
    // The template itself may reject a conversation (raise_exception, e.g. roles that do not
    // alternate): that is the caller's input.
    send_error(*writer, metrics, kApi, 400, std::string("chat template: ") + e.what(),
               "messages");
    return;
  }
  auto call = std::make_shared<Call>();
  call->chat = true;
  call->id = "chatcmpl-" + req.request_id;
  call->stream = cr.stream;
  call->include_usage = cr.stream && cr.include_usage;
  call->logprobs = cr.logprobs ? cr.top_logprobs : -1;
  run_call(req, std::move(writer), host, metrics, p, std::move(call), std::move(prompt),
           cr.fields, "messages");
}

void handle_models(const HttpRequest&, std::shared_ptr<ResponseWriter> writer, ModelHost& host,
                   ServeMetrics& metrics) {
  Json model{{"id", host.name()},
             {"object", "model"},
             {"created", static_cast<int64_t>(std::time(nullptr))},
             {"owned_by", "sampan"}};
  if (auto engine = host.engine()) model["max_model_len"] = engine->max_model_len();
  const Json body{{"object", "list"}, {"data", Json::array({std::move(model)})}};
  writer->respond(200, dump(body));
  metrics.request_done(kApi, 200);
}

}  // namespace sampan::server
