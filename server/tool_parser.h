// Tool calls parsed out of a model's free text (tool_choice "auto"), in the format its chat
// template teaches it: the template's own rendering of an assistant message with tool_calls is
// what the model was trained to write (tests/server/test_tool_parser.cc renders the real
// templates of ../shared/fixtures and parses them back).
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeatable, text
//                around them is content (Qwen2.5, Hermes, many fine-tunes)
//   llama3_json  the whole reply one {"name": ..., "parameters": {...}} object, or several
//                joined by ';' (Llama 3.1 / 3.2 custom tools; <|python_tag|> before it allowed)
//   mistral      [TOOL_CALLS] then a JSON list of {"name", "arguments"} (the marker is a special
//                token, so the decoded reply may start with the list itself)
// A reply that does not hold well-formed calls stays content, whole: nothing is lost.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace sampan::server {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral };

// "none", "hermes", "llama3_json", "mistral" (the --tool-call-parser values besides "auto").
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(ToolCallFormat f);
// The format a chat template teaches (kNone when it shows none of them).
ToolCallFormat detect_tool_call_format(std::string_view chat_template);

struct ParsedToolCalls {
  std::string content;  // the text that is not a call (trimmed; empty when there is none)
  nlohmann::ordered_json calls = nlohmann::ordered_json::array();  // [{name, arguments: text}]
};

// The calls in a whole reply; nullopt when it holds none (or a malformed one): it is content.
std::optional<ParsedToolCalls> parse_tool_calls(ToolCallFormat f, std::string_view text);

// The same over a stream of text pieces: push() returns the content that can be sent now,
// holding back what may be (the start of) a call; finish() parses what was held.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat f) : format_(f) {}
  std::string push(std::string_view piece);
  // The held text's calls (content: the held text that is not a call), or, when it holds none,
  // nullopt and the held text comes back in `rest`.
  std::optional<ParsedToolCalls> finish(std::string* rest);

 private:
  ToolCallFormat format_;
  std::string held_;
  bool holding_all_ = false;  // a call has started: everything from here is held
  bool passing_ = false;      // the reply is plain text (llama3_json / mistral decide early)
};

}  // namespace sampan::server
