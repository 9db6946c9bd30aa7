#include "server/openai_api.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "server/gateway.h"
#include "server/request_parse.h"
#include "server/tool_parser.h"

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

// The text a token adds after `prev` (-1: at the start): decode([prev, id]) past decode([prev]),
// so that a SentencePiece word keeps its leading space (decode([id]) alone drops it, and
// text_offset would drift from the text by a character a word), as vLLM and OpenAI report
// tokens; decode([id]) where the pair's text does not extend prev's. prev is decoded once for a
// position's token and all its alternatives.
class TokenNamer {
 public:
  TokenNamer(const tok::Tokenizer& tokenizer, int32_t prev) : tokenizer_(tokenizer), prev_(prev) {
    if (prev_ >= 0) prev_text_ = tokenizer_.decode(std::array<int32_t, 1>{prev_}, false);
  }
  std::string operator()(int32_t id) const {
    const std::array<int32_t, 1> one{id};
    if (prev_ < 0) return tokenizer_.decode(one, false);
    std::string pair = tokenizer_.decode(std::array<int32_t, 2>{prev_, id}, false);
    if (pair.compare(0, prev_text_.size(), prev_text_) == 0 && pair.size() >= prev_text_.size())
      return pair.substr(prev_text_.size());
    return tokenizer_.decode(one, false);
  }

 private:
  const tok::Tokenizer& tokenizer_;
  int32_t prev_;
  std::string prev_text_;
};

// One OpenAI request (one engine request per choice: per_prompt choices for each prompt) from
// submit to the final event of its last choice. Shared by the handler (until the stream is
// open), the engine thread (events) and the connection (on_close).
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
  // Chat with a forced tool call: the named tool's arguments are the whole output, or (required)
  // the output is a JSON list of {name, arguments}; either comes back as message.tool_calls.
  std::string forced_tool;
  bool tool_required = false;
  // Chat with tools and tool_choice "auto": calls read out of the reply in this format.
  ToolCallFormat tool_parser = ToolCallFormat::kNone;
  // The prompts in choice order: choice i reads prompt i / per_prompt (chat: one). With echo
  // (completions) each choice's text starts with its prompt's, and with logprobs its logprobs
  // with the prompt's tokens (the first one unscored).
  struct Prompt {
    std::string text;          // what echo prepends
    std::vector<int32_t> ids;  // its tokens
  };
  std::vector<Prompt> prompts;
  int32_t per_prompt = 1;    // choices generated per prompt (best_of)
  int32_t n_return = 1;      // choices returned per prompt: the best by mean token logprob
  bool echo = false;
  bool prompt_only = false;  // max_tokens 0 with echo: the one token generated is dropped
  // vLLM's prompt_logprobs (not streamed): -1 none, else the alternatives per prompt token;
  // completions return each choice's prompt's, chat the prompt's at the top level.
  int32_t prompt_lp = -1;

  explicit Call(int32_t n_choices) : choices_(static_cast<size_t>(n_choices)) {}
  int32_t n() const { return static_cast<int32_t>(choices_.size()); }

  // Engine thread: an event of choice i.
  void on_event(int32_t i, const runtime::EngineEvent& ev) {
    Choice& c = choices_[static_cast<size_t>(i)];
    metrics->observe_token(ev, c.clock);
    if (ev.finished) {
      c.finish = ev.finish;
      c.usage = ev.usage;
      ++n_finished_;
    }
    if (stream) {
      stream_event(i, ev);
    } else {
      collect(i, c, ev);
      if (ev.finished && !failed_) {
        if (const std::optional<Error> e = failure(ev)) {
          // The first failed choice answers the whole request; the others are cancelled.
          failed_ = true;
          if (claim_response()) send_error(*writer, *metrics, kApi, *e);
          if (cancel_rest) cancel_rest();
        } else if (n_finished_ == n() && claim_response()) {
          finish_whole();
        }
      }
    }
    if (ev.finished) metrics->generation_done(ev);
  }

  // Cancels every choice's engine request (set by submit_call before the first submission).
  std::function<void()> cancel_rest;

  // Whole responses: true for the one caller that may answer (a failed or finished request on
  // the engine thread, or the handler when a later choice's submission failed).
  bool claim_response() {
    std::lock_guard<std::mutex> lock(mu_);
    if (claimed_) return false;
    claimed_ = true;
    return true;
  }

  // Handler thread, after every choice was submitted: opens the stream and flushes what the
  // engine produced meanwhile.
  void open_stream() {
    std::lock_guard<std::mutex> lock(mu_);
    writer->start_stream(200, "text/event-stream",
                         {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    if (chat) {
      for (int32_t i = 0; i < n(); ++i) {
        Json delta{{"role", "assistant"}, {"content", ""}};
        if (!forced_tool.empty()) {
          // The call's head first; its arguments follow as the tokens come.
          delta["content"] = nullptr;
          delta["tool_calls"] = Json::array({Json{{"index", 0},
                                                  {"id", call_id(i, 0)},
                                                  {"type", "function"},
                                                  {"function", {{"name", forced_tool},
                                                                {"arguments", ""}}}}});
        }
        writer->write(sse(dump(chunk(i, std::move(delta)))));
      }
    }
    for (std::string& c : early_) writer->write(std::move(c));
    early_.clear();
    if (end_pending_) end_locked();
    opened_ = true;
  }

 private:
  struct Choice {
    std::optional<ToolCallStream> tools;  // streaming with tool_parser
    std::string text;
    Json lp;
    int64_t text_offset = 0;
    TokenClock clock;
    runtime::EngineFinish finish = runtime::EngineFinish::kLength;
    runtime::EngineUsage usage;
    bool echoed = false;
    Json prompt_scores;  // vLLM's prompt_logprobs, from the first event (prompt_lp >= 0)
    double lp_sum = 0;  // logprobs of its tokens (and of the stop id that ended it)
    int64_t lp_count = 0;
    // The generated token before the next one (-1: none yet): the next one's text follows its.
    // The first is decoded alone, as the reply's text starts (StreamDecoder: a SentencePiece
    // reply does not start with its first word's space), so that the tokens add up to the text.
    int32_t prev = -1;
  };

  // The logprobs of a token that follows `prev`, with their texts in that context.
  Json token_logprob_chat(int32_t prev, int32_t token, const runtime::SampleResult& s) const {
    const TokenNamer name(*tokenizer, prev);
    Json top = Json::array();
    for (const runtime::TokenLogprob& t : s.top) {
      const std::string text = name(t.id);
      top.push_back({{"token", text}, {"logprob", t.logprob}, {"bytes", utf8_bytes(text)}});
    }
    const std::string text = name(token);
    return Json{{"token", text}, {"logprob", s.logprob}, {"bytes", utf8_bytes(text)},
                {"top_logprobs", std::move(top)}};
  }

  // The completion API's parallel arrays, for a token that follows `prev`.
  // At most n_top alternatives (the engine scores a prompt for the larger of echo's logprobs
  // and prompt_logprobs).
  void add_completion_logprob(Json& lp, int64_t& text_offset, int32_t prev, int32_t token,
                              const runtime::SampleResult& s, size_t n_top = SIZE_MAX) const {
    const TokenNamer name(*tokenizer, prev);
    const std::string text = name(token);
    Json top = Json::object();
    top[text] = s.logprob;
    for (size_t a = 0; a < s.top.size() && a < n_top; ++a) {
      top[name(s.top[a].id)] = s.top[a].logprob;
    }
    lp["tokens"].push_back(text);
    lp["token_logprobs"].push_back(s.logprob);
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(text_offset);
    text_offset += static_cast<int64_t>(text.size());
  }

  static Json empty_completion_logprobs() {
    return Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()},
                {"top_logprobs", Json::array()}, {"text_offset", Json::array()}};
  }

  // Echo (completions), on choice i's first event: its prompt's text onto `text` and, with
  // logprobs, its tokens onto `lp`, scored by the event's prompt logprobs (the first token, and
  // any the engine did not score, null as OpenAI's).
  void add_echo(int32_t i, Choice& c, const runtime::EngineEvent& ev, std::string& text,
                Json& lp) const {
    if (!echo || c.echoed) return;
    c.echoed = true;
    const Prompt& p = prompts[static_cast<size_t>(i / per_prompt)];
    text += p.text;
    if (logprobs < 0) return;
    if (lp.is_null()) lp = empty_completion_logprobs();
    for (size_t k = 0; k < p.ids.size(); ++k) {
      const int32_t prev = k > 0 ? p.ids[k - 1] : -1;
      if (k > 0 && k - 1 < ev.prompt_logprobs.size()) {
        add_completion_logprob(lp, c.text_offset, prev, p.ids[k], ev.prompt_logprobs[k - 1],
                               static_cast<size_t>(logprobs));
        continue;
      }
      const std::string t = TokenNamer(*tokenizer, prev)(p.ids[k]);
      lp["tokens"].push_back(t);
      lp["token_logprobs"].push_back(nullptr);
      lp["top_logprobs"].push_back(nullptr);
      lp["text_offset"].push_back(c.text_offset);
      c.text_offset += static_cast<int64_t>(t.size());
    }
  }

  // vLLM's prompt_logprobs of choice i's prompt, from its first event: null for the first token
  // (and any the engine did not score), then per token {id: {logprob, rank, decoded_token}} for
  // the token itself (its rank over the vocabulary) and its prompt_lp most likely alternatives
  // (ranks 1, 2, ... in order), each named by the text it adds after the token before.
  Json vllm_prompt_logprobs(int32_t i, const runtime::EngineEvent& ev) const {
    const Prompt& p = prompts[static_cast<size_t>(i / per_prompt)];
    Json out = Json::array();
    for (size_t k = 0; k < p.ids.size(); ++k) {
      if (k == 0 || k - 1 >= ev.prompt_logprobs.size()) {
        out.push_back(nullptr);
        continue;
      }
      const runtime::SampleResult& s = ev.prompt_logprobs[k - 1];
      const TokenNamer name(*tokenizer, p.ids[k - 1]);
      auto entry = [&](int32_t id, float logprob, int64_t rank) {
        return Json{{"logprob", logprob}, {"rank", rank}, {"decoded_token", name(id)}};
      };
      Json e = Json::object();
      for (size_t a = 0; a < s.top.size() && a < static_cast<size_t>(prompt_lp); ++a) {
        e[std::to_string(s.top[a].id)] =
            entry(s.top[a].id, s.top[a].logprob, static_cast<int64_t>(a) + 1);
      }
      e[std::to_string(p.ids[k])] = entry(p.ids[k], s.logprob, s.rank);
      out.push_back(std::move(e));
    }
    return out;
  }

  // The usage of the request: each prompt counted once (its choices all read it; its cached
  // part as its first choice saw it), the completion tokens of every choice generated (none
  // when only the prompt was asked for).
  runtime::EngineUsage total_usage() const {
    runtime::EngineUsage u;
    for (size_t i = 0; i < choices_.size(); ++i) {
      const runtime::EngineUsage& c = choices_[i].usage;
      if (i % static_cast<size_t>(per_prompt) == 0) {
        u.prompt_tokens += c.prompt_tokens;
        u.cached_prompt_tokens += c.cached_prompt_tokens;
      }
      if (!prompt_only) u.completion_tokens += c.completion_tokens;
    }
    return u;
  }

  std::string call_id(int32_t choice, size_t k) const {
    return fmt::format("call_{}_{}_{}", id, choice, k);
  }

  // [{name, arguments: text}] -> OpenAI's tool_calls of choice i (with stream indices).
  Json openai_calls(int32_t i, const Json& calls, bool delta) const {
    Json out = Json::array();
    for (size_t k = 0; k < calls.size(); ++k) {
      Json c{{"id", call_id(i, k)},
             {"type", "function"},
             {"function", {{"name", calls[k]["name"]}, {"arguments", calls[k]["arguments"]}}}};
      if (delta) c["index"] = k;
      out.push_back(std::move(c));
    }
    return out;
  }

  // Choice i's text read as tool calls: `calls` [{name, arguments}] (null when it holds none:
  // no tools, plain text, or a list of calls cut short by max_tokens) and the content beside
  // them (null when there is none).
  struct Reading {
    Json calls;
    Json content;
  };
  Reading read_calls(const std::string& text) const {
    if (!forced_tool.empty()) {
      return {Json::array({Json{{"name", forced_tool}, {"arguments", text}}}), nullptr};
    }
    if (tool_required) {
      const Json list = Json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!list.is_array() || list.empty()) return {nullptr, text};
      Json calls = Json::array();
      for (const Json& c : list) {
        if (!c.is_object() || !c.contains("name") || !c["name"].is_string() ||
            !c.contains("arguments")) {
          return {nullptr, text};
        }
        calls.push_back({{"name", c["name"]}, {"arguments", dump(c["arguments"])}});
      }
      return {std::move(calls), nullptr};
    }
    if (tool_parser != ToolCallFormat::kNone) {
      if (std::optional<ParsedToolCalls> p = parse_tool_calls(tool_parser, text)) {
        return {std::move(p->calls), p->content.empty() ? Json(nullptr) : Json(p->content)};
      }
    }
    return {nullptr, text};
  }

  // A chat message or final delta: the text, or the tool calls it holds (read once); *finish:
  // OpenAI's finish reason, "tool_calls" when the model chose to call (required, or calls found
  // in free text), for a named tool that of text.
  Json message(int32_t i, const std::string& text, bool delta, runtime::EngineFinish f,
               const char** finish) const {
    Json m = delta ? Json::object() : Json{{"role", "assistant"}};
    Reading r = read_calls(text);
    *finish = !r.calls.is_null() && forced_tool.empty() ? "tool_calls" : finish_reason(f);
    m["content"] = std::move(r.content);
    if (!r.calls.is_null()) m["tool_calls"] = openai_calls(i, r.calls, delta);
    return m;
  }


  Json chunk(int32_t index, Json delta_or_text, const char* finish = nullptr,
             Json lp = nullptr) const {
    Json choice = Json::object();
    choice["index"] = index;
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

  void stream_event(int32_t i, const runtime::EngineEvent& ev) {
    if (failed_) return;  // the stream already ended with an error
    Choice& c = choices_[static_cast<size_t>(i)];
    std::vector<std::string> out;
    bool end = false;
    if (const std::optional<Error> e = failure(ev)) {
      // One failed choice ends the whole stream: the error, then [DONE]; the others are
      // cancelled.
      failed_ = true;
      end = true;
      status_ = http_status(e->code());
      out.push_back(sse(error_json(e->what(), error_type(status_), e->field(), status_)));
      out.push_back(sse("[DONE]"));
    } else {
      Json lp = nullptr;
      std::string echoed;
      if (!chat) add_echo(i, c, ev, echoed, lp);
      if (ev.token >= 0 && logprobs >= 0 && !prompt_only) {
        if (chat) {
          lp = Json{{"content", Json::array({token_logprob_chat(c.prev, ev.token, ev.sample)})}};
        } else {
          if (lp.is_null()) lp = empty_completion_logprobs();
          add_completion_logprob(lp, c.text_offset, c.prev, ev.token, ev.sample);
        }
      }
      if (ev.token >= 0) c.prev = ev.token;
      const char* fin = nullptr;
      Json delta;
      if (tool_required) {
        // The list is only known to be one once it is complete: sent whole at the end.
        c.text += ev.text;
        delta = ev.finished ? message(i, c.text, /*delta=*/true, ev.finish, &fin)
                            : Json::object();
      } else if (chat && tool_parser != ToolCallFormat::kNone) {
        // Content as it comes, except what may be (the start of) a call; the calls at the end.
        if (!c.tools) c.tools.emplace(tool_parser);
        std::string content = c.tools->push(ev.text);
        Json calls = nullptr;
        if (ev.finished) {
          std::string rest;
          std::optional<ParsedToolCalls> p = c.tools->finish(&rest);
          content += p ? p->content : rest;
          if (p) calls = openai_calls(i, p->calls, /*delta=*/true);
          fin = p ? "tool_calls" : finish_reason(ev.finish);
        }
        delta = Json::object();
        if (!content.empty()) delta["content"] = content;
        if (!calls.is_null()) delta["tool_calls"] = std::move(calls);
      } else {
        if (ev.finished) fin = prompt_only ? "length" : finish_reason(ev.finish);
        if (!chat) {
          delta = prompt_only ? echoed : echoed + ev.text;
        } else if (ev.text.empty()) {
          delta = Json::object();
        } else if (!forced_tool.empty()) {
          delta = Json{{"tool_calls", Json::array({Json{{"index", 0},
                                                       {"function", {{"arguments", ev.text}}}}})}};
        } else {
          delta = Json{{"content", ev.text}};
        }
      }
      if ((delta.is_object() && !delta.empty()) ||
          (delta.is_string() && !delta.get_ref<const std::string&>().empty()) || !lp.is_null() ||
          fin) {
        out.push_back(sse(dump(chunk(i, std::move(delta), fin, std::move(lp)))));
      }
      end = n_finished_ == n();
      if (end && include_usage) {
        Json u = chunk(0, chat ? Json::object() : Json(""));
        u["choices"] = Json::array();
        u["usage"] = usage_json(total_usage());
        out.push_back(sse(dump(u)));
      }
      if (end) out.push_back(sse("[DONE]"));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!opened_) {
        for (std::string& s : out) early_.push_back(std::move(s));
        end_pending_ = end;
      } else {
        for (std::string& s : out) writer->write(std::move(s));
        if (end) end_locked();
      }
    }
    if (failed_ && cancel_rest) cancel_rest();
  }

  void end_locked() {
    // A client that went away first counts as cancelled. A stream that failed after its 200
    // header counts with the status a whole response would have had.
    const int code = writer->closed() ? http_status(ErrorCode::kCancelled) : status_;
    writer->end();
    metrics->request_done(kApi, code);
  }

  void collect(int32_t i, Choice& c, const runtime::EngineEvent& ev) const {
    if (!chat) add_echo(i, c, ev, c.text, c.lp);
    if (prompt_lp >= 0 && c.prompt_scores.is_null()) c.prompt_scores = vllm_prompt_logprobs(i, ev);
    if (prompt_only) return;
    c.text += ev.text;
    if (ev.token >= 0 || ev.stop_token >= 0) {
      c.lp_sum += ev.sample.logprob;
      ++c.lp_count;
    }
    if (ev.token < 0) return;
    const int32_t prev = std::exchange(c.prev, ev.token);
    if (logprobs < 0) return;
    if (chat) {
      if (c.lp.is_null()) c.lp = Json{{"content", Json::array()}};
      c.lp["content"].push_back(token_logprob_chat(prev, ev.token, ev.sample));
    } else {
      if (c.lp.is_null()) c.lp = empty_completion_logprobs();
      add_completion_logprob(c.lp, c.text_offset, prev, ev.token, ev.sample);
    }
  }

  // The choices returned, in order: for each prompt, its per_prompt choices, or with best_of the
  // n_return of highest mean logprob per token (the stop id that ended one counted; ties: the
  // earlier choice), as vLLM ranks them.
  std::vector<int32_t> returned() const {
    std::vector<int32_t> out;
    for (int32_t g = 0; g * per_prompt < n(); ++g) {
      std::vector<int32_t> group(static_cast<size_t>(per_prompt));
      for (int32_t j = 0; j < per_prompt; ++j) group[static_cast<size_t>(j)] = g * per_prompt + j;
      if (n_return < per_prompt) {
        auto mean = [&](int32_t i) {
          const Choice& c = choices_[static_cast<size_t>(i)];
          return c.lp_count > 0 ? c.lp_sum / static_cast<double>(c.lp_count) : -INFINITY;
        };
        std::stable_sort(group.begin(), group.end(),
                         [&](int32_t a, int32_t b) { return mean(a) > mean(b); });
        group.resize(static_cast<size_t>(n_return));
      }
      out.insert(out.end(), group.begin(), group.end());
    }
    return out;
  }

  void finish_whole() {
    Json list = Json::array();
    const std::vector<int32_t> order = returned();
    for (size_t index = 0; index < order.size(); ++index) {
      const int32_t i = order[index];
      Choice& c = choices_[static_cast<size_t>(i)];
      if (logprobs >= 0 && c.lp.is_null())
        c.lp = chat ? Json{{"content", Json::array()}} : empty_completion_logprobs();
      Json choice = Json::object();
      choice["index"] = index;
      const char* fin = prompt_only ? "length" : finish_reason(c.finish);
      if (chat) choice["message"] = message(i, c.text, /*delta=*/false, c.finish, &fin);
      else choice["text"] = c.text;
      choice["logprobs"] = c.lp;
      choice["finish_reason"] = fin;
      if (prompt_lp >= 0 && !chat) choice["prompt_logprobs"] = c.prompt_scores;
      list.push_back(std::move(choice));
    }
    Json body{{"id", id},
              {"object", chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", std::move(list)},
              {"usage", usage_json(total_usage())}};
    // Chat's choices share one prompt: its scores once, beside them (as vLLM).
    if (prompt_lp >= 0 && chat) body["prompt_logprobs"] = choices_.front().prompt_scores;
    writer->respond(200, dump(body));
    metrics->request_done(kApi, 200);
  }

  // Engine thread only.
  std::vector<Choice> choices_;
  int32_t n_finished_ = 0;
  bool failed_ = false;
  int status_ = 200;
  // Guarded by mu_: hand-off between the handler and the engine thread.
  std::mutex mu_;
  bool opened_ = false;
  bool claimed_ = false;
  std::vector<std::string> early_;
  bool end_pending_ = false;
};

// Submits the call's engine requests, one per choice (choice i reads prompts[i / per_prompt],
// `fields` named `prompt_fields` of it in errors; seeded with seed + i when a seed is given, so
// that seeded choices differ yet each is reproducible; with echo and logprobs its prompt is
// scored too); throws Error (naming the field at fault) before anything is answered, which the
// router sends, after cancelling the choices already submitted.
void submit_call(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer, ModelHost& host,
                 const std::shared_ptr<runtime::Engine>& engine, std::shared_ptr<Call> call,
                 const std::vector<std::vector<int32_t>>& prompts, const SamplingFields& fields,
                 const std::vector<std::string>& prompt_fields, int32_t lora) {
  call->created = static_cast<int64_t>(std::time(nullptr));
  // Responses name what the client asked for: the base, or the adapter it picked.
  call->model = host.model_name(lora);
  call->tokenizer = &engine->tokenizer();
  call->writer = writer;
  // The choices' engine handles, filled here while the engine thread may already be cancelling
  // (a failed choice cancels the rest): guarded, and a cancel also covers later submissions.
  struct Handles {
    std::mutex mu;
    std::vector<uint64_t> ids;
    bool cancelled = false;
    void cancel(runtime::Engine& e) {
      std::vector<uint64_t> now;
      {
        std::lock_guard<std::mutex> lock(mu);
        cancelled = true;
        now = ids;
      }
      for (uint64_t h : now) e.cancel(h);
    }
  };
  auto handles = std::make_shared<Handles>();
  // On the engine thread, inside the engine: a plain pointer (a shared one taken there could end
  // up the last and destroy the engine from its own thread).
  call->cancel_rest = [raw = engine.get(), handles] { handles->cancel(*raw); };
  std::weak_ptr<runtime::Engine> weak = engine;
  auto cancel_all = [weak, handles] {
    if (auto e = weak.lock()) handles->cancel(*e);
  };
  try {
    for (int32_t i = 0; i < call->n(); ++i) {
      const auto p = static_cast<size_t>(i / call->per_prompt);
      runtime::EngineRequest er =
          engine_request(host, *engine, req.request_id, prompts[p], fields, prompt_fields[p]);
      er.lora = lora;
      er.prompt_logprobs =
          std::max(call->echo && call->logprobs >= 0 ? call->logprobs : -1, call->prompt_lp);
      if (er.sampling.seed && i > 0) *er.sampling.seed += static_cast<uint64_t>(i);
      const uint64_t h = engine->submit(
          std::move(er), [call, i](const runtime::EngineEvent& ev) { call->on_event(i, ev); });
      bool late = false;
      {
        std::lock_guard<std::mutex> lock(handles->mu);
        handles->ids.push_back(h);
        late = handles->cancelled;
      }
      if (late) engine->cancel(h);
    }
  } catch (...) {
    // A later choice refused (the queue filled up): the request fails as a whole, unless an
    // earlier choice already failed and answered it. A stream is not open yet, so what the
    // earlier choices produced was only buffered.
    cancel_all();
    if (call->stream || call->claim_response()) throw;
    return;
  }
  writer->on_close(cancel_all);
  if (writer->closed()) cancel_all();
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
  const auto n_prompts = static_cast<int32_t>(cr.prompts.size());
  auto call = std::make_shared<Call>(n_prompts * cr.best_of);
  call->id = "cmpl-" + req.request_id;
  call->stream = cr.stream;
  call->include_usage = cr.stream && cr.include_usage;
  call->logprobs = cr.logprobs;
  call->metrics = &metrics;
  call->per_prompt = cr.best_of;
  call->n_return = cr.n;
  call->echo = cr.echo;
  call->prompt_only = cr.prompt_only;
  call->prompt_lp = cr.prompt_logprobs;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> fields;
  const tok::Tokenizer& tokenizer = engine->tokenizer();
  for (int32_t i = 0; i < n_prompts; ++i) {
    const CompletionPrompt& p = cr.prompts[static_cast<size_t>(i)];
    prompts.push_back(p.text ? tokenizer.encode(*p.text, /*add_special=*/true) : p.ids);
    fields.push_back(n_prompts == 1 ? "prompt" : fmt::format("prompt[{}]", i));
    if (cr.echo || cr.prompt_logprobs >= 0) {
      call->prompts.push_back({p.text ? *p.text : tokenizer.decode(p.ids), prompts.back()});
    }
  }
  submit_call(req, std::move(writer), host, engine, std::move(call), prompts, cr.fields, fields,
              lora);
}

void handle_chat_completions(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                             ModelHost& host, ServeMetrics& metrics) {
  const ChatRequest cr = parse_chat_request(parse_json_object(req.body));
  int32_t lora = -1;
  const auto engine = admit(host, cr.model, "model", &lora);
  cli::ChatOptions options;
  options.add_generation_prompt = cr.add_generation_prompt;
  options.continue_final_message = cr.continue_final_message;
  options.vars = cr.template_vars;
  std::vector<int32_t> prompt =
      encode_chat(host, cr.messages, cr.tools, "messages", "use /v1/completions", options);
  auto call = std::make_shared<Call>(cr.n);
  call->per_prompt = cr.n;
  call->n_return = cr.n;
  call->chat = true;
  call->id = "chatcmpl-" + req.request_id;
  call->stream = cr.stream;
  call->include_usage = cr.stream && cr.include_usage;
  call->logprobs = cr.logprobs ? cr.top_logprobs : -1;
  call->metrics = &metrics;
  call->forced_tool = cr.forced_tool;
  call->tool_required = cr.tool_required;
  call->prompt_lp = cr.prompt_logprobs;
  if (cr.prompt_logprobs >= 0) call->prompts.push_back({"", prompt});
  if (!cr.tools.is_null() && !cr.tool_choice_none && cr.forced_tool.empty() &&
      !cr.tool_required) {
    call->tool_parser = host.tool_call_format();
  }
  submit_call(req, std::move(writer), host, engine, std::move(call), {std::move(prompt)},
              cr.fields, {"messages"}, lora);
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
