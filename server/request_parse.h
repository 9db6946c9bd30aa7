// Request validation shared by the HTTP APIs (OpenAI, KServe v2 REST) and the gRPC services
// (KServe sampling_parameters JSON): JSON -> sampling and stopping fields of an EngineRequest,
// and the OpenAI completion / chat bodies -> plain structs. Pure functions of the JSON (no
// engine, no tokenizer), so every rule is unit-tested alone. Every failure is a RequestError
// (an Error of kind kInvalidArgument) naming the offending field, which the front ends turn into
// their 400 / INVALID_ARGUMENT.
//
// Conventions: a field that is absent or JSON null takes its default (clients such as the
// `openai` package send null for "not given"); numbers given for integer fields must be
// integral (5 and 5.0 are accepted, 5.5 is not); unknown fields are ignored, as OpenAI-style
// servers do.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/engine.h"

namespace sampan::server {

using Json = nlohmann::ordered_json;

// A request the server refuses while parsing it: Error(kInvalidArgument) whose field() names
// the offending field (empty when the whole body is at fault), with a one-line message that
// names it too. Front ends catch it as any Error (gateway.h maps the kind to a status).
class RequestError : public Error {
 public:
  RequestError(std::string field, const std::string& message)
      : Error(ErrorCode::kInvalidArgument, std::move(field), message) {}
  // The same refusal from a shared check (sampling_limits.h) that throws a plain Error.
  explicit RequestError(const Error& e) : Error(e) {}
  int status() const;  // its HTTP status, from gateway.h's table (400)
  const std::string& param() const { return field(); }  // OpenAI's name for field()
};

// Nesting deeper than this is refused while parsing, before anything walks the value: copies,
// dumps and the chat template's values recurse over nested arrays and objects, so an unbounded
// depth would let one request overflow a server thread's stack. Real requests nest a few levels
// (a tool's JSON schema perhaps 20).
inline constexpr int kMaxRequestJsonDepth = 64;

// Parses `text` as a JSON object. Errors: 400 "invalid JSON: ..." (param "") when it does not
// parse, 400 naming the top-level field when a value nests deeper than kMaxRequestJsonDepth,
// 400 "<what> must be a JSON object" when it is another JSON value.
Json parse_json_object(std::string_view text, const std::string& what = "request body");

// The OpenAI API's limit on stop strings (sampling limits are in engine/runtime/sampling_limits.h).
inline constexpr size_t kMaxStopStrings = 4;

// Sampling and stopping fields every API accepts in one JSON object:
//   temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty
//   (ranges in engine/runtime/sampling_limits.h; top_k -1 also means off, as in vLLM), seed
//   (integer; negative values are taken modulo 2^64), stop (string or list of at most 4
//   non-empty strings), stop_token_ids (list of ids >= 0), ignore_eos (bool), max_tokens
//   (integer >= 1), logit_bias (object of token id in canonical decimal -> bias in [-100, 100];
//   ids past the vocabulary are refused by the engine, naming "logit_bias").
// `prefix` is prepended to field names in errors (e.g. "sampling_parameters.").
struct SamplingFields {
  runtime::SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false;
  bool include_stop_str = false;     // vLLM's include_stop_str_in_output
  bool skip_special_tokens = true;   // vLLM's skip_special_tokens
  std::optional<int64_t> max_tokens;  // absent: the server's default applies
  bool json_object = false;           // chat's response_format {"type": "json_object"}
  // Chat's response_format json_schema, or a forced tool call (tool_choice "required" or named).
  std::shared_ptr<const runtime::Grammar> grammar;

  // Copies everything but max_tokens into `req` (sampling, stop, stop_ids, ignore_eos,
  // include_stop_str, skip_special_tokens, json_object, grammar).
  void apply_to(runtime::EngineRequest& req) const;
};
// max_tokens below `min_max_tokens` is a 400 naming it (0 only where a route gives it a meaning:
// completions' echo).
SamplingFields parse_sampling_fields(const Json& obj, const std::string& prefix = "",
                                     int64_t min_max_tokens = 1);
// Same, on top of `base` (fields present in `obj` override it): KServe's request "parameters"
// object, then its sampling_parameters tensor. Both read OpenAI's response_format too (a
// "text" type clears what an earlier object asked for).
void merge_sampling_fields(const Json& obj, SamplingFields& base, const std::string& prefix = "",
                           int64_t min_max_tokens = 1);

// The max_tokens a request runs with: the requested value, or `default_max_tokens`, capped so
// that prompt + output fit in `max_model_len` (the engine would stop there anyway). Requires
// prompt_tokens < max_model_len.
int64_t effective_max_tokens(std::optional<int64_t> requested, int64_t default_max_tokens,
                             int64_t prompt_tokens, int64_t max_model_len);

// Typed accessors used by the parsers above and by the API handlers; each throws RequestError
// 400 naming `name` (prefixed) on a wrong type. Absent or null gives std::nullopt.
std::optional<bool> get_bool(const Json& obj, const char* name, const std::string& prefix = "");
std::optional<int64_t> get_int(const Json& obj, const char* name, const std::string& prefix = "");
std::optional<double> get_number(const Json& obj, const char* name,
                                 const std::string& prefix = "");
std::optional<std::string> get_string(const Json& obj, const char* name,
                                      const std::string& prefix = "");

// The most choices (`n`) one request may ask for (OpenAI's limit).
inline constexpr int32_t kMaxChoices = 128;

// One prompt of a completion request: text, or token ids (then `text` is empty).
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

// POST /v1/completions.
struct CompletionRequest {
  std::string model;                     // empty when absent
  std::vector<CompletionPrompt> prompts;  // at least one
  SamplingFields fields;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int32_t logprobs = -1;       // -1: none; 0..20: chosen token plus that many alternatives
  int32_t n = 1;               // choices returned per prompt, 1..kMaxChoices
  int32_t best_of = 1;         // choices generated per prompt (>= n); the best n are returned
  bool echo = false;           // each choice's text (and logprobs) starts with its prompt's
  bool prompt_only = false;    // echo with max_tokens 0: the prompt alone (fields.max_tokens 1)
  int32_t prompt_logprobs = -1;  // vLLM's: -1 none; 0..20 alternatives per prompt token
};
// prompt: string | [string, ...] | [int, ...] | [[int, ...], ...] (a batch: choices ordered by
// prompt, then by choice). n in [1, kMaxChoices]; best_of in [n, kMaxChoices] (best_of > n: the
// n of highest mean token logprob, not streamed); prompts x best_of <= kMaxChoices. echo: the
// prompt is part of each choice's text, and with logprobs its tokens are scored too (the first
// one's logprob null); max_tokens 0 only with echo. 400 naming the field otherwise.
// response_format as in chat, and prompt_logprobs (0..20, not with stream; each returned
// choice's prompt_logprobs: vLLM's list, null for the first prompt token, then per token
// {id: {logprob, rank, decoded_token}} for it and its most likely alternatives): extensions, as
// in vLLM.
CompletionRequest parse_completion_request(const Json& body);

// POST /v1/chat/completions.
struct ChatRequest {
  std::string model;
  Json messages;  // [{role, content, ...}] with content normalised to a string
  Json tools;     // null, or the non-empty list of {type: "function", function: {name, ...}}
  SamplingFields fields;  // max_tokens from max_completion_tokens or max_tokens
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;  // 0..20, only with logprobs
  int32_t n = 1;             // choices, 1..kMaxChoices
  // tool_choice forcing a call: "required" (the output is a JSON list of {name, arguments}) or
  // the named tool (the output is its arguments); fields.grammar holds the constraint.
  bool tool_required = false;
  std::string forced_tool;
  bool tool_choice_none = false;  // "none": the reply is text, calls are not read out of it
  int32_t prompt_logprobs = -1;   // vLLM's, as in CompletionRequest (the response's top level)
  // vLLM's template inputs: add_generation_prompt (default true), continue_final_message
  // (default false; not with add_generation_prompt), and the variables of chat_template_kwargs
  // and documents (an object, maybe empty).
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  Json template_vars;
};
// messages: non-empty list of {role: string, content: string | [{type: "text", text}] | null,
// name: string, tool_call_id: string, tool_calls: [{id, type: "function", function: {name,
// arguments}}]}; other message keys are kept for the chat template. A tool call's `arguments`
// string that holds a JSON object reaches the template as that object (as vLLM does: templates
// such as Llama 3.1's print it with tojson).
// tools: list of {type: "function", function: {name, description?, parameters?: object,
// strict?}}, handed to the chat template as `tools`; tool_choice "none" | "auto" (the model's
// output comes back as text: tool calls are not parsed out of it), "required" or
// {type: "function", function: {name}} (decoding constrained to the call: tool_required /
// forced_tool, fields.grammar; errors in a tool's schema name tools[i].function.parameters).
// response_format {type: "text"}, {type: "json_object"} (JSON mode: fields.json_object) or
// {type: "json_schema", json_schema: {name?, schema?, strict?}} (fields.grammar; errors name
// response_format.json_schema.schema and the keyword's JSON pointer). A forced tool call with
// a JSON response_format is refused.
// logit_bias as in SamplingFields. functions / function_call (deprecated) are refused: use
// tools.
ChatRequest parse_chat_request(const Json& body);

}  // namespace sampan::server
