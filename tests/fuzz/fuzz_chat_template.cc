// Chat templates: the input is "template NUL variables-json". The template is parsed and, when
// it parses, rendered with the variables (a JSON object: messages, tools, ...) or, without a
// NUL, with a fixed conversation. Seeds: the real templates of ../shared/fixtures plus the
// committed corpus.
#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/core/error.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const nlohmann::ordered_json& default_vars() {
  static const nlohmann::ordered_json v = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "Hello", "tool_calls": [{"type": "function",
                   "function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "content": "42"},
                 {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [source, vars_text] = sampan::fuzz::split_at_nul(sampan::fuzz::as_text(data, size));
  nlohmann::ordered_json vars = default_vars();
  if (!vars_text.empty()) {
    // Not depth-limited on purpose: the template's value conversion must bound its own
    // recursion. A bad JSON part falls back to the fixed variables.
    auto parsed = nlohmann::ordered_json::parse(vars_text.begin(), vars_text.end(), nullptr, false);
    if (parsed.is_object()) vars = std::move(parsed);
  }
  try {
    const auto t = sampan::chat::Template::parse(std::string(source), "fuzz.jinja");
    (void)t.render(vars);
  } catch (const sampan::Error&) {
  }
  return 0;
}
