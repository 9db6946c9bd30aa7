#include "server/request_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "engine/runtime/guided_grammar.h"
#include "engine/runtime/json_schema.h"
#include "engine/runtime/sampling_limits.h"

namespace sampan::server {
namespace {

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::binary:
    case Json::value_t::discarded: break;
  }
  return "an unsupported value";
}

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw RequestError(field, message);
}

// The shared range check (sampling_limits.h), refusing as the parsers do.
void check_sampling(runtime::SamplingParam p, double value, const std::string& field) {
  try {
    runtime::check_sampling_param(p, value, field);
  } catch (const Error& e) {
    throw RequestError(e);
  }
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const Json& v) {
  bad(field, fmt::format("'{}' must be {}, got {}", field, expected, type_name(v)));
}

const Json* find(const Json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integral JSON number as int64 (5 and 5.0; not 5.5, not 1e30).
std::optional<int64_t> as_int(const Json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return std::nullopt;
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9.0e18)
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

int32_t token_id(const Json& v, const std::string& field) {
  const auto id = as_int(v);
  if (!id) wrong_type(field, "a list of integer token ids", v);
  if (*id < 0 || *id > std::numeric_limits<int32_t>::max())
    bad(field, fmt::format("'{}' holds token id {}, outside [0, 2^31)", field, *id));
  return static_cast<int32_t>(*id);
}

void check_range(const std::string& field, double v, double lo, double hi) {
  if (!(std::isfinite(v) && v >= lo && v <= hi))
    bad(field, fmt::format("'{}' must be in [{}, {}], got {}", field, lo, hi, v));
}

std::vector<std::string> parse_stop(const Json& v, const std::string& field) {
  std::vector<std::string> stops;
  if (v.is_string()) {
    stops.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > kMaxStopStrings)
      bad(field, fmt::format("'{}' holds {} strings, at most {} are allowed", field, v.size(),
                             kMaxStopStrings));
    for (const Json& s : v) {
      if (!s.is_string()) wrong_type(field, "a string or a list of strings", s);
      stops.push_back(s.get<std::string>());
    }
  } else {
    wrong_type(field, "a string or a list of strings", v);
  }
  for (const std::string& s : stops)
    if (s.empty()) bad(field, fmt::format("'{}' holds an empty string", field));
  return stops;
}

bool get_stream(const Json& body, bool* include_usage) {
  const bool stream = get_bool(body, "stream").value_or(false);
  *include_usage = false;
  if (const Json* opts = find(body, "stream_options")) {
    if (!opts->is_object()) wrong_type("stream_options", "an object", *opts);
    *include_usage = get_bool(*opts, "include_usage", "stream_options.").value_or(false);
  }
  return stream;
}

// vLLM's prompt_logprobs (completions and chat): -1 when absent or null, else the alternatives
// per prompt token, in top_logprobs' range. Not streamed, as in vLLM.
int32_t get_prompt_logprobs(const Json& body, bool stream) {
  const auto v = get_int(body, "prompt_logprobs");
  if (!v) return -1;
  check_sampling(runtime::SamplingParam::kTopLogprobs, static_cast<double>(*v),
                 "prompt_logprobs");
  if (stream)
    bad("prompt_logprobs", "'prompt_logprobs' cannot be streamed (as in vLLM): ask without "
                           "'stream'");
  return static_cast<int32_t>(*v);
}

std::string get_model(const Json& body) { return get_string(body, "model").value_or(""); }

// n: choices per request, in [1, kMaxChoices].
int32_t get_n(const Json& body) {
  const auto n = get_int(body, "n");
  if (!n) return 1;
  if (*n < 1 || *n > kMaxChoices)
    bad("n", fmt::format("'n' must be in [1, {}], got {}", kMaxChoices, *n));
  return static_cast<int32_t>(*n);
}

std::string message_content(const Json& content, const std::string& field) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(field, "a string or a list of text parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pf = fmt::format("{}[{}]", field, i);
    if (!part.is_object()) wrong_type(pf, "an object {type, text}", part);
    const auto type = get_string(part, "type", pf + ".");
    if (type.value_or("") != "text")
      bad(pf + ".type", fmt::format("'{}.type' must be \"text\" (only text parts are supported)",
                                    pf));
    const auto t = get_string(part, "text", pf + ".");
    if (!t) bad(pf + ".text", fmt::format("'{}.text' is required", pf));
    text += *t;
  }
  return text;
}

// Parses `text` under kMaxRequestJsonDepth. nullopt with `*syntax_error` set when it is not
// JSON. Too deep: RequestError naming the top-level field inside (prefixed by `prefix`), or
// `field` itself when the value is not an object.
std::optional<Json> parse_json_limited(std::string_view text, const std::string& field,
                                       const std::string& prefix, std::string* syntax_error) {
  std::string key;  // the top-level key being parsed
  auto limit_depth = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
    if (event == Json::parse_event_t::key && depth == 1) {
      key = parsed.get<std::string>();
    } else if ((event == Json::parse_event_t::object_start ||
                event == Json::parse_event_t::array_start) &&
               depth >= kMaxRequestJsonDepth) {
      const std::string name = key.empty() ? field : prefix + key;
      throw RequestError(key.empty() ? "" : name,
                         fmt::format("{} nests deeper than {} levels",
                                     key.empty() ? name : "'" + name + "'", kMaxRequestJsonDepth));
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), limit_depth);
  } catch (const Json::exception& e) {
    // parse_error, or out_of_range for a number past double's range (1e999). nlohmann's
    // message starts "[json.exception.parse_error.101] parse error at ..."; the bracketed tag
    // means nothing to a client.
    std::string m = e.what();
    if (const size_t p = m.find("] "); m.rfind("[json.exception", 0) == 0 && p != m.npos)
      m = m.substr(p + 2);
    *syntax_error = std::move(m);
    return std::nullopt;
  }
}

// logit_bias: {"<token id>": bias in [-100, 100]}, keys in canonical decimal (no sign, spaces or
// leading zeros), so each id appears once and the list is at most the vocabulary long. Ids past
// the vocabulary are the engine's to refuse (it knows the model).
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& v, const std::string& field) {
  std::vector<std::pair<int32_t, float>> out;
  if (!v.is_object()) wrong_type(field, "an object of token id -> bias", v);
  for (const auto& [key, bias] : v.items()) {
    const std::string f = fmt::format("{}[{}]", field, Json(key).dump());
    const bool digits =
        !key.empty() && key.size() <= 10 && (key.size() == 1 || key[0] != '0') &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const long long id = digits ? std::stoll(key) : -1;
    if (!digits || id > std::numeric_limits<int32_t>::max())
      bad(field, fmt::format("'{}' key {} is not a token id", field, Json(key).dump()));
    if (!bias.is_number()) wrong_type(f, "a number", bias);
    check_range(f, bias.get<double>(), -100, 100);
    out.emplace_back(static_cast<int32_t>(id), bias.get<float>());
  }
  return out;
}

// A tool call's arguments as the template sees them: a JSON object when the string holds one,
// else the string as it is.
Json tool_arguments(const Json& args, const std::string& field) {
  if (args.is_object()) return args;
  if (!args.is_string()) wrong_type(field, "a string holding a JSON object", args);
  std::string syntax_error;
  std::optional<Json> parsed = parse_json_limited(args.get_ref<const std::string&>(),
                                                  "'" + field + "'", field + ".", &syntax_error);
  if (parsed && parsed->is_object()) return std::move(*parsed);
  return args;
}

void check_tool_calls(const Json& calls, Json& out, const std::string& mf) {
  const std::string f = mf + ".tool_calls";
  if (!calls.is_array()) wrong_type(f, "a list of tool calls", calls);
  for (size_t k = 0; k < calls.size(); ++k) {
    const Json& c = calls[k];
    const std::string cf = fmt::format("{}[{}]", f, k);
    if (!c.is_object()) wrong_type(cf, "an object {id, type, function}", c);
    get_string(c, "id", cf + ".");
    if (get_string(c, "type", cf + ".").value_or("function") != "function")
      bad(cf + ".type", fmt::format("'{}.type' must be \"function\"", cf));
    const Json* fn = find(c, "function");
    if (!fn) bad(cf + ".function", fmt::format("'{}.function' is required", cf));
    if (!fn->is_object()) wrong_type(cf + ".function", "an object {name, arguments}", *fn);
    const auto name = get_string(*fn, "name", cf + ".function.");
    if (!name || name->empty())
      bad(cf + ".function.name", fmt::format("'{}.function.name' is required", cf));
    if (const Json* args = find(*fn, "arguments"))
      out[k]["function"]["arguments"] = tool_arguments(*args, cf + ".function.arguments");
  }
}

Json check_tools(const Json& body) {
  const Json* v = find(body, "tools");
  if (!v) return nullptr;
  if (!v->is_array()) wrong_type("tools", "a list of function tools", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& t = (*v)[i];
    const std::string tf = fmt::format("tools[{}]", i);
    if (!t.is_object()) wrong_type(tf, "an object {type: \"function\", function}", t);
    const auto type = get_string(t, "type", tf + ".");
    if (type.value_or("") != "function")
      bad(tf + ".type", fmt::format("'{}.type' must be \"function\"", tf));
    const Json* fn = find(t, "function");
    if (!fn) bad(tf + ".function", fmt::format("'{}.function' is required", tf));
    if (!fn->is_object()) wrong_type(tf + ".function", "an object {name, parameters, ...}", *fn);
    const auto name = get_string(*fn, "name", tf + ".function.");
    if (!name || name->empty())
      bad(tf + ".function.name", fmt::format("'{}.function.name' is required", tf));
    get_string(*fn, "description", tf + ".function.");
    get_bool(*fn, "strict", tf + ".function.");
    if (const Json* p = find(*fn, "parameters"); p && !p->is_object())
      wrong_type(tf + ".function.parameters", "an object (a JSON schema)", *p);
  }
  if (v->empty()) return nullptr;
  return *v;
}

// A schema compiled to a grammar; its errors as a RequestError naming the field.
std::shared_ptr<const runtime::Grammar> schema_grammar(const Json& schema,
                                                       const std::string& field) {
  try {
    return runtime::compile_json_schema(schema.dump(), field);
  } catch (const RequestError&) {
    throw;
  } catch (const Error& e) {
    throw RequestError(e);
  }
}

// tool_choice: "none" | "auto" (nothing forced), "required" (a list of calls of any of the
// tools) or {type: "function", function: {name}} (that tool's arguments): the forced ones set
// r.tool_required / r.forced_tool and the grammar in r.fields.
void parse_tool_choice(const Json& body, ChatRequest& r) {
  const Json* v = find(body, "tool_choice");
  if (!v) return;
  const bool have_tools = !r.tools.is_null();
  if (v->is_string()) {
    const std::string& c = v->get_ref<const std::string&>();
    if (c == "none" || c == "auto") {
      r.tool_choice_none = c == "none";
      return;
    }
    if (c != "required")
      bad("tool_choice", fmt::format("'tool_choice' must be \"none\", \"auto\" or "
                                     "\"required\", got {}", Json(c).dump()));
    if (!have_tools) bad("tool_choice", "'tool_choice' is \"required\" but 'tools' is empty");
    std::vector<runtime::ToolSchema> schemas;
    for (size_t i = 0; i < r.tools.size(); ++i) {
      const Json& fn = r.tools[i]["function"];
      const Json* p = find(fn, "parameters");
      schemas.push_back({fn["name"].get<std::string>(), p ? p->dump() : R"({"type":"object"})",
                         fmt::format("tools[{}].function.parameters", i)});
    }
    const bool parallel = get_bool(body, "parallel_tool_calls").value_or(true);
    try {
      r.fields.grammar = runtime::compile_tool_calls(schemas, parallel, "tools");
    } catch (const Error& e) {
      throw RequestError(e);
    }
    r.tool_required = true;
    return;
  }
  if (!v->is_object()) wrong_type("tool_choice", "a string or an object", *v);
  if (!have_tools) bad("tool_choice", "'tool_choice' names a function but 'tools' is empty");
  if (get_string(*v, "type", "tool_choice.").value_or("") != "function")
    bad("tool_choice.type", "'tool_choice.type' must be \"function\"");
  const Json* fn = find(*v, "function");
  if (!fn || !fn->is_object()) wrong_type("tool_choice.function", "an object {name}",
                                          fn ? *fn : Json());
  const auto name = get_string(*fn, "name", "tool_choice.function.");
  if (!name) bad("tool_choice.function.name", "'tool_choice.function.name' is required");
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const Json& tf = r.tools[i]["function"];
    if (tf["name"] != *name) continue;
    const Json* p = find(tf, "parameters");
    r.fields.grammar = schema_grammar(p ? *p : Json{{"type", "object"}},
                                      fmt::format("tools[{}].function.parameters", i));
    r.forced_tool = *name;
    return;
  }
  bad("tool_choice.function.name",
      fmt::format("'tool_choice.function.name' {} is not one of 'tools'", Json(*name).dump()));
}

// response_format: {type: "text"}, {type: "json_object"} (JSON mode) or {type: "json_schema",
// json_schema: {name, description?, schema?, strict?}} (a grammar; without a schema, JSON mode).
void parse_response_format(const Json& obj, SamplingFields& f, const std::string& prefix) {
  const Json* v = find(obj, "response_format");
  if (!v || v->is_null()) return;
  const std::string rf = prefix + "response_format";
  if (!v->is_object()) wrong_type(rf, "an object {type}", *v);
  const auto type = get_string(*v, "type", rf + ".");
  if (!type) bad(rf + ".type", fmt::format("'{}.type' is required", rf));
  if (*type == "text") {
    f.json_object = false;
    f.grammar.reset();
    return;
  }
  if (*type == "json_object") {
    f.json_object = true;
    f.grammar.reset();
    return;
  }
  if (*type != "json_schema")
    bad(rf + ".type", fmt::format("'{}.type' must be \"text\", \"json_object\" or "
                                  "\"json_schema\", got {}", rf, Json(*type).dump()));
  const std::string js_name = rf + ".json_schema";
  const Json* js = find(*v, "json_schema");
  if (!js) bad(js_name, fmt::format("'{}' is required", js_name));
  if (!js->is_object()) wrong_type(js_name, "an object {name, schema, strict}", *js);
  // OpenAI's rule for the name: required, a-z, A-Z, 0-9, '_' and '-', at most 64.
  const auto name = get_string(*js, "name", js_name + ".");
  if (!name || name->empty() || name->size() > 64 ||
      !std::all_of(name->begin(), name->end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      }))
    bad(js_name + ".name",
        fmt::format("'{}.name' is required: 1 to 64 of a-z, A-Z, 0-9, '_', '-'", js_name));
  get_string(*js, "description", js_name + ".");
  get_bool(*js, "strict", js_name + ".");
  const Json* schema = find(*js, "schema");
  if (!schema) {
    f.json_object = true;
    f.grammar.reset();
    return;
  }
  f.json_object = false;
  f.grammar = schema_grammar(*schema, js_name + ".schema");
}

// vLLM's guided decoding fields (its OpenAI server's extensions, and its sampling parameters on
// KServe): guided_json (a schema object or its JSON text: as response_format json_schema),
// guided_regex (the output a whole match), guided_choice (one of the strings); at most one, and
// not beside a response_format asking for JSON. guided_grammar and guided_whitespace_pattern
// are refused; guided_decoding_backend (which library vLLM uses) is accepted and changes
// nothing.
void parse_guided(const Json& obj, SamplingFields& f, const std::string& prefix) {
  const char* given = nullptr;
  for (const char* n : {"guided_json", "guided_regex", "guided_choice", "guided_grammar"}) {
    if (!find(obj, n)) continue;
    if (given)
      bad(prefix + n, fmt::format("'{}' and '{}' both constrain the output: choose one",
                                  prefix + given, prefix + n));
    given = n;
  }
  for (const char* n : {"guided_grammar", "guided_whitespace_pattern"}) {
    if (find(obj, n))
      bad(prefix + n, fmt::format("'{}' is not supported (guided_json, guided_regex and "
                                  "guided_choice are)", prefix + n));
  }
  get_string(obj, "guided_decoding_backend", prefix);
  if (!given) return;
  const std::string field = prefix + given;
  if (const Json* rf = find(obj, "response_format"); rf && (f.json_object || f.grammar))
    bad(field, fmt::format("'{}' and '{}response_format' both constrain the output: choose one",
                           field, prefix));
  const Json& v = *find(obj, given);
  try {
    if (std::string_view(given) == "guided_json") {
      if (v.is_string()) {
        f.grammar = runtime::compile_json_schema(v.get_ref<const std::string&>(), field);
      } else if (v.is_object()) {
        f.grammar = runtime::compile_json_schema(v.dump(), field);
      } else {
        wrong_type(field, "a JSON schema (an object, or its text)", v);
      }
    } else if (std::string_view(given) == "guided_regex") {
      if (!v.is_string()) wrong_type(field, "a string (a regular expression)", v);
      f.grammar = runtime::compile_regex_grammar(v.get_ref<const std::string&>(), field);
    } else {
      if (!v.is_array()) wrong_type(field, "a list of strings", v);
      std::vector<std::string> choices;
      for (const Json& c : v) {
        if (!c.is_string()) wrong_type(field, "a list of strings", v);
        choices.push_back(c.get<std::string>());
      }
      f.grammar = runtime::compile_choice_grammar(choices, field);
    }
  } catch (const RequestError&) {
    throw;
  } catch (const Error& e) {
    throw RequestError(e);
  }
  f.json_object = false;
}

// Fields of the OpenAI API that Sampan does not implement: refused when given, rather than
// silently ignored.
void refuse_unsupported(const Json& body, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (find(body, n)) bad(n, fmt::format("'{}' is not supported", n));
}

// vLLM's extensions that Sampan does not implement: refused unless absent, null or at vLLM's
// default (which is what Sampan does), since ignoring them would change the output unasked.
void refuse_vllm_unsupported(const Json& body, bool chat) {
  struct Field {
    const char* name;
    Json default_value;  // null: any value is refused
  };
  std::vector<Field> fields = {
      {"min_tokens", 0},
      {"use_beam_search", false},
      {"length_penalty", 1.0},
      {"priority", 0},
      {"return_tokens_as_token_ids", false},
      {"add_special_tokens", !chat},
      {"truncate_prompt_tokens", nullptr},
      {"allowed_token_ids", nullptr},
      {"bad_words", nullptr},
      {"logits_processors", nullptr},
      {"prompt_embeds", nullptr},
      {"structured_outputs", nullptr},
  };
  // Chat only (completions have an echo of their own and no template).
  if (chat) fields.insert(fields.end(), {{"chat_template", nullptr}, {"echo", false}});
  for (const Field& f : fields) {
    const Json* v = find(body, f.name);
    if (!v || v->is_null()) continue;
    // Numbers compare by value (1 and 1.0 are both length_penalty's default).
    const bool at_default =
        !f.default_value.is_null() &&
        (*v == f.default_value || (v->is_number() && f.default_value.is_number() &&
                                   v->get<double>() == f.default_value.get<double>()));
    if (!at_default)
      bad(f.name, f.default_value.is_null()
                      ? fmt::format("'{}' is not supported", f.name)
                      : fmt::format("'{}' is not supported (only its default, {})", f.name,
                                    f.default_value.dump()));
  }
}

}  // namespace

Json parse_json_object(std::string_view text, const std::string& what) {
  std::string syntax_error;
  std::optional<Json> j = parse_json_limited(text, what, "", &syntax_error);
  if (!j) throw RequestError("", "invalid JSON: " + syntax_error);
  if (!j->is_object()) throw RequestError("", what + " must be a JSON object");
  return std::move(*j);
}

std::optional<bool> get_bool(const Json& obj, const char* name, const std::string& prefix) {
  const Json* v = find(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(prefix + name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<int64_t> get_int(const Json& obj, const char* name, const std::string& prefix) {
  const Json* v = find(obj, name);
  if (!v) return std::nullopt;
  const auto i = as_int(*v);
  if (!i) wrong_type(prefix + name, "an integer", *v);
  return i;
}

std::optional<double> get_number(const Json& obj, const char* name, const std::string& prefix) {
  const Json* v = find(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(prefix + name, "a number", *v);
  return v->get<double>();
}

std::optional<std::string> get_string(const Json& obj, const char* name,
                                      const std::string& prefix) {
  const Json* v = find(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(prefix + name, "a string", *v);
  return v->get<std::string>();
}


void SamplingFields::apply_to(runtime::EngineRequest& req) const {
  req.sampling = sampling;
  req.stop = stop;
  req.stop_ids = stop_ids;
  req.ignore_eos = ignore_eos;
  req.include_stop_str = include_stop_str;
  req.skip_special_tokens = skip_special_tokens;
  req.json_object = json_object;
  req.grammar = grammar;
}

void merge_sampling_fields(const Json& obj, SamplingFields& f, const std::string& prefix,
                           int64_t min_max_tokens) {
  auto name = [&](const char* n) { return prefix + n; };
  runtime::SamplingParams& s = f.sampling;
  using runtime::SamplingParam;
  // Checked on the value as sent, before it narrows to float.
  auto number = [&](const char* n, SamplingParam p, float& out) {
    if (auto v = get_number(obj, n, prefix)) {
      check_sampling(p, *v, name(n));
      out = static_cast<float>(*v);
    }
  };
  number("temperature", SamplingParam::kTemperature, s.temperature);
  number("top_p", SamplingParam::kTopP, s.top_p);
  if (auto v = get_int(obj, "top_k", prefix)) {
    check_sampling(SamplingParam::kTopK, *v == -1 ? 0 : static_cast<double>(*v), name("top_k"));
    s.top_k = static_cast<int32_t>(*v == -1 ? 0 : *v);
  }
  number("min_p", SamplingParam::kMinP, s.min_p);
  number("presence_penalty", SamplingParam::kPresencePenalty, s.presence_penalty);
  number("frequency_penalty", SamplingParam::kFrequencyPenalty, s.frequency_penalty);
  number("repetition_penalty", SamplingParam::kRepetitionPenalty, s.repetition_penalty);
  if (const Json* v = find(obj, "seed")) {
    // Seeds only select a random stream: any 64-bit pattern is as good as another, so negative
    // seeds (allowed by OpenAI) wrap instead of failing.
    if (v->is_number_unsigned()) {
      s.seed = v->get<uint64_t>();
    } else if (const auto i = as_int(*v)) {
      s.seed = static_cast<uint64_t>(*i);
    } else {
      wrong_type(name("seed"), "an integer", *v);
    }
  }
  if (const Json* v = find(obj, "stop")) f.stop = parse_stop(*v, name("stop"));
  if (const Json* v = find(obj, "stop_token_ids")) {
    if (!v->is_array()) wrong_type(name("stop_token_ids"), "a list of integer token ids", *v);
    f.stop_ids.clear();
    for (const Json& id : *v) f.stop_ids.push_back(token_id(id, name("stop_token_ids")));
  }
  if (const Json* v = find(obj, "logit_bias"); v && !v->is_null())
    s.logit_bias = parse_logit_bias(*v, name("logit_bias"));
  if (auto v = get_bool(obj, "ignore_eos", prefix)) f.ignore_eos = *v;
  // vLLM's detokenisation fields.
  if (auto v = get_bool(obj, "include_stop_str_in_output", prefix)) f.include_stop_str = *v;
  if (auto v = get_bool(obj, "skip_special_tokens", prefix)) f.skip_special_tokens = *v;
  // Special tokens' texts are written as the tokenizer decodes them, with no spaces between
  // them (vLLM puts one there by default, with skip_special_tokens false): typed, either value
  // accepted.
  get_bool(obj, "spaces_between_special_tokens", prefix);
  if (auto v = get_int(obj, "max_tokens", prefix)) {
    if (*v < min_max_tokens)
      bad(name("max_tokens"),
          fmt::format("'{}' must be at least {}, got {}", name("max_tokens"), min_max_tokens, *v));
    f.max_tokens = *v;
  }
  // On /v1/completions and KServe an extension (as vLLM accepts it) rather than ignored.
  parse_response_format(obj, f, prefix);
  parse_guided(obj, f, prefix);
}

SamplingFields parse_sampling_fields(const Json& obj, const std::string& prefix,
                                     int64_t min_max_tokens) {
  SamplingFields f;
  merge_sampling_fields(obj, f, prefix, min_max_tokens);
  return f;
}

int64_t effective_max_tokens(std::optional<int64_t> requested, int64_t default_max_tokens,
                             int64_t prompt_tokens, int64_t max_model_len) {
  const int64_t room = std::max<int64_t>(1, max_model_len - prompt_tokens);
  return std::max<int64_t>(1, std::min(requested.value_or(default_max_tokens), room));
}

namespace {

// One prompt of /v1/completions: a non-empty string or list of token ids.
CompletionPrompt completion_prompt(const Json& p, const std::string& field, const char* expected,
                                   const Json& whole) {
  CompletionPrompt out;
  if (p.is_string()) {
    out.text = p.get<std::string>();
    if (out.text->empty()) bad("prompt", fmt::format("'{}' is empty", field));
  } else if (p.is_array()) {
    if (p.empty()) bad("prompt", fmt::format("'{}' is empty", field));
    for (const Json& id : p) {
      if (!id.is_number()) wrong_type("prompt", expected, whole);
      out.ids.push_back(token_id(id, "prompt"));
    }
  } else {
    wrong_type("prompt", expected, whole);
  }
  return out;
}

}  // namespace

CompletionRequest parse_completion_request(const Json& body) {
  CompletionRequest r;
  r.model = get_model(body);
  const Json* prompt = find(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  const char* expected = "a string, a list of strings, a list of token ids or a list of lists of "
                         "token ids";
  if (prompt->is_array() && !prompt->empty() &&
      ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    // A batch: every element a prompt of its own, strings and id lists alike.
    for (size_t i = 0; i < prompt->size(); ++i) {
      const Json& p = (*prompt)[i];
      if (!p.is_string() && !p.is_array()) wrong_type("prompt", expected, *prompt);
      r.prompts.push_back(completion_prompt(p, fmt::format("prompt[{}]", i), expected, *prompt));
    }
  } else {
    r.prompts.push_back(completion_prompt(*prompt, "prompt", expected, *prompt));
  }
  r.n = get_n(body);
  r.best_of = r.n;
  if (const auto b = get_int(body, "best_of")) {
    if (*b < r.n || *b > kMaxChoices)
      bad("best_of", fmt::format("'best_of' must be in [n, {}] (n = {}), got {}", kMaxChoices,
                                 r.n, *b));
    r.best_of = static_cast<int32_t>(*b);
  }
  const auto n_prompts = static_cast<int64_t>(r.prompts.size());
  if (n_prompts * r.best_of > kMaxChoices)
    bad("prompt", fmt::format("'prompt' holds {} prompts, each with {} choices: {} in all, more "
                              "than the {} one request may run",
                              n_prompts, r.best_of, n_prompts * r.best_of, kMaxChoices));
  r.echo = get_bool(body, "echo").value_or(false);
  if (const Json* v = find(body, "suffix"))
    if (!v->is_string() || !v->get<std::string>().empty())
      bad("suffix", "'suffix' is not supported");
  if (const auto lp = get_int(body, "logprobs")) {
    check_sampling(runtime::SamplingParam::kTopLogprobs, static_cast<double>(*lp), "logprobs");
    r.logprobs = static_cast<int32_t>(*lp);
  }
  // max_tokens 0 asks for the prompt alone (its logprobs), which only echo returns: the engine
  // still decodes one token, which is dropped.
  r.fields = parse_sampling_fields(body, "", r.echo ? 0 : 1);
  r.prompt_only = r.fields.max_tokens == 0;
  if (r.prompt_only) r.fields.max_tokens = 1;
  if (r.logprobs > 0) r.fields.sampling.top_logprobs = r.logprobs;
  // best_of > n ranks the choices by their tokens' logprobs, which the engine must report.
  r.fields.sampling.logprobs = r.logprobs >= 0 || r.best_of > r.n;
  r.stream = get_stream(body, &r.include_usage);
  r.prompt_logprobs = get_prompt_logprobs(body, r.stream);
  refuse_vllm_unsupported(body, /*chat=*/false);
  if (r.stream && r.best_of > r.n)
    bad("best_of", fmt::format("'best_of' ({}) above n ({}) cannot be streamed: the best are "
                               "known only at the end", r.best_of, r.n));
  get_string(body, "user");  // accepted for compatibility; only its type is checked
  return r;
}

ChatRequest parse_chat_request(const Json& body) {
  ChatRequest r;
  r.model = get_model(body);
  const Json* msgs = find(body, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  if (!msgs->is_array()) wrong_type("messages", "a list of messages", *msgs);
  if (msgs->empty()) bad("messages", "'messages' is empty");
  r.messages = Json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Json& m = (*msgs)[i];
    const std::string mf = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(mf, "an object {role, content}", m);
    const auto role = get_string(m, "role", mf + ".");
    if (!role || role->empty()) bad(mf + ".role", fmt::format("'{}.role' is required", mf));
    Json out = m;
    const auto it = m.find("content");
    out["content"] = message_content(it == m.end() ? Json() : *it, mf + ".content");
    get_string(m, "name", mf + ".");
    get_string(m, "tool_call_id", mf + ".");
    if (const Json* calls = find(m, "tool_calls")) check_tool_calls(*calls, out["tool_calls"], mf);
    r.messages.push_back(std::move(out));
  }
  r.tools = check_tools(body);
  get_bool(body, "parallel_tool_calls");
  refuse_unsupported(body, {"functions", "function_call", "audio", "prediction"});
  r.n = get_n(body);
  r.fields = parse_sampling_fields(body);
  const bool formatted = r.fields.json_object || r.fields.grammar;
  parse_tool_choice(body, r);
  if (formatted && (r.tool_required || !r.forced_tool.empty()))
    bad("tool_choice", "'tool_choice' forces a tool call and 'response_format' (or a guided_* "
                       "field) constrains the output: choose one");
  // max_completion_tokens is the newer name; it wins when both are given.
  if (auto v = get_int(body, "max_completion_tokens")) {
    if (*v <= 0)
      bad("max_completion_tokens",
          fmt::format("'max_completion_tokens' must be at least 1, got {}", *v));
    r.fields.max_tokens = *v;
  }
  r.logprobs = get_bool(body, "logprobs").value_or(false);
  if (const auto tl = get_int(body, "top_logprobs")) {
    check_sampling(runtime::SamplingParam::kTopLogprobs, static_cast<double>(*tl),
                   "top_logprobs");
    if (*tl > 0 && !r.logprobs)
      bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r.top_logprobs = static_cast<int32_t>(*tl);
  }
  r.fields.sampling.top_logprobs = r.logprobs ? r.top_logprobs : 0;
  r.fields.sampling.logprobs = r.logprobs;
  r.stream = get_stream(body, &r.include_usage);
  r.prompt_logprobs = get_prompt_logprobs(body, r.stream);
  refuse_vllm_unsupported(body, /*chat=*/true);
  // The template's inputs beyond messages and tools (vLLM's fields).
  r.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  r.continue_final_message = get_bool(body, "continue_final_message").value_or(false);
  if (r.add_generation_prompt && r.continue_final_message)
    bad("continue_final_message", "'continue_final_message' continues the last message and "
                                  "'add_generation_prompt' opens a new turn: set "
                                  "'add_generation_prompt' to false");
  r.template_vars = Json::object();
  if (const Json* kw = find(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      wrong_type("chat_template_kwargs", "an object of template variables", *kw);
    for (const auto& [k, v] : kw->items()) {
      if (k == "messages" || k == "tools" || k == "add_generation_prompt" || k == "documents")
        bad("chat_template_kwargs",
            fmt::format("'chat_template_kwargs.{}' is the request's own '{}' field", k, k));
      r.template_vars[k] = v;
    }
  }
  if (const Json* docs = find(body, "documents")) {
    if (!docs->is_array()) wrong_type("documents", "a list of objects", *docs);
    for (const Json& d : *docs)
      if (!d.is_object()) wrong_type("documents", "a list of objects", *docs);
    r.template_vars["documents"] = *docs;
  }
  get_string(body, "user");
  return r;
}

}  // namespace sampan::server
