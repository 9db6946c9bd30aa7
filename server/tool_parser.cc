#include "server/tool_parser.h"

#include <algorithm>

namespace sampan::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::optional<Json> parse(std::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// {"name": "...", <args_key>: {...} or "..."} -> {name, arguments: JSON text}.
std::optional<Json> call_of(const Json& c, std::initializer_list<const char*> args_keys) {
  if (!c.is_object() || !c.contains("name") || !c["name"].is_string() ||
      c["name"].get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  Json out{{"name", c["name"]}, {"arguments", "{}"}};
  for (const char* k : args_keys) {
    if (!c.contains(k)) continue;
    const Json& a = c[k];
    if (a.is_string()) {
      out["arguments"] = a;
    } else if (a.is_object()) {
      out["arguments"] = a.dump(-1, ' ', false, Json::error_handler_t::replace);
    } else {
      return std::nullopt;
    }
    break;
  }
  return out;
}

std::optional<ParsedToolCalls> parse_hermes(std::string_view text) {
  ParsedToolCalls r;
  std::string content;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == std::string_view::npos) {
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, open - pos);
    const size_t body = open + kHermesOpen.size();
    size_t close = text.find(kHermesClose, body);
    // A reply may end right after the object, the closing tag never written.
    const size_t end = close == std::string_view::npos ? text.size() : close;
    const std::optional<Json> j = parse(trim(text.substr(body, end - body)));
    if (!j) return std::nullopt;
    const std::optional<Json> c = call_of(*j, {"arguments", "parameters"});
    if (!c) return std::nullopt;
    r.calls.push_back(*c);
    pos = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
  }
  if (r.calls.empty()) return std::nullopt;
  r.content = std::string(trim(content));
  return r;
}

std::optional<ParsedToolCalls> parse_llama3(std::string_view text) {
  std::string_view s = trim(text);
  if (s.substr(0, kPythonTag.size()) == kPythonTag) s = trim(s.substr(kPythonTag.size()));
  if (s.empty() || s.front() != '{') return std::nullopt;
  ParsedToolCalls r;
  // One object, or several joined by ';' (a ';' inside a string is not a boundary: each piece
  // must parse on its own).
  size_t start = 0;
  while (start < s.size()) {
    size_t cut = s.size();
    std::optional<Json> j;
    for (size_t semi = s.find(';', start);; semi = s.find(';', semi + 1)) {
      cut = semi == std::string_view::npos ? s.size() : semi;
      j = parse(trim(s.substr(start, cut - start)));
      if (j || semi == std::string_view::npos) break;
    }
    if (!j) return std::nullopt;
    const std::optional<Json> c = call_of(*j, {"parameters", "arguments"});
    if (!c) return std::nullopt;
    r.calls.push_back(*c);
    start = cut + 1;
  }
  return r;
}

std::optional<ParsedToolCalls> parse_mistral(std::string_view text) {
  std::string_view s = trim(text);
  if (s.substr(0, kMistralTag.size()) == kMistralTag) s = trim(s.substr(kMistralTag.size()));
  if (s.empty() || s.front() != '[') return std::nullopt;
  const std::optional<Json> j = parse(s);
  if (!j || !j->is_array() || j->empty()) return std::nullopt;
  ParsedToolCalls r;
  for (const Json& e : *j) {
    const std::optional<Json> c = call_of(e, {"arguments", "parameters"});
    if (!c) return std::nullopt;
    r.calls.push_back(*c);
  }
  return r;
}

// The length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return std::nullopt;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kNone: break;
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
  if (t.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (t.find(kMistralTag) != std::string_view::npos) return ToolCallFormat::kMistral;
  // Llama 3.1's template asks for {"name": function name, "parameters": ...}.
  if (t.find("\"parameters\": ") != std::string_view::npos &&
      (t.find(kPythonTag) != std::string_view::npos ||
       t.find("<|eot_id|>") != std::string_view::npos)) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

std::optional<ParsedToolCalls> parse_tool_calls(ToolCallFormat f, std::string_view text) {
  switch (f) {
    case ToolCallFormat::kHermes: return parse_hermes(text);
    case ToolCallFormat::kLlama3Json: return parse_llama3(text);
    case ToolCallFormat::kMistral: return parse_mistral(text);
    case ToolCallFormat::kNone: break;
  }
  return std::nullopt;
}

std::string ToolCallStream::push(std::string_view piece) {
  if (format_ == ToolCallFormat::kNone || passing_) {
    std::string out = std::move(held_) + std::string(piece);
    held_.clear();
    return out;
  }
  held_ += piece;
  if (holding_all_) return {};
  if (format_ == ToolCallFormat::kHermes) {
    // Text before a <tool_call> is content; a tail that may begin the tag waits.
    const size_t open = held_.find(kHermesOpen);
    std::string out;
    if (open != std::string::npos) {
      out = held_.substr(0, open);
      held_.erase(0, open);
      holding_all_ = true;
      return out;
    }
    const size_t keep = partial_marker(held_, kHermesOpen);
    out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }
  // llama3_json / mistral: the reply's first non-space text decides.
  const std::string_view s = trim(held_);
  if (s.empty()) return {};
  const char opener = format_ == ToolCallFormat::kLlama3Json ? '{' : '[';
  const std::string_view tag = format_ == ToolCallFormat::kLlama3Json ? kPythonTag : kMistralTag;
  const bool tag_so_far = s.size() < tag.size() ? tag.substr(0, s.size()) == s
                                                 : s.substr(0, tag.size()) == tag;
  if (s.front() == opener || tag_so_far) {
    holding_all_ = s.front() == opener || s.size() >= tag.size();
    return {};
  }
  passing_ = true;
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

std::optional<ParsedToolCalls> ToolCallStream::finish(std::string* rest) {
  std::optional<ParsedToolCalls> r;
  if (holding_all_) r = parse_tool_calls(format_, held_);
  if (!r) *rest = std::move(held_);
  held_.clear();
  return r;
}

}  // namespace sampan::server
