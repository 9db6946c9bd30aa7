#include "server/chat_prompt.h"

#include "engine/core/error.h"

namespace sampan::cli {
namespace {

chat::Template parse_template(const tok::Tokenizer& tokenizer, const std::string& model_dir) {
  SAMPAN_CHECK(!tokenizer.chat_template().empty(), ErrorCode::kNotFound,
               "{}: the tokenizer has no chat template (tokenizer_config.json 'chat_template' or "
               "chat_template.jinja)",
               model_dir);
  return chat::Template::parse(tokenizer.chat_template(), model_dir + "/chat_template");
}

}  // namespace

ChatPrompt::ChatPrompt(const tok::Tokenizer& tokenizer, const std::string& model_dir)
    : tokenizer_(tokenizer), template_(parse_template(tokenizer, model_dir)) {}

std::string ChatPrompt::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& tools) const {
  ChatOptions o;
  o.add_generation_prompt = add_generation_prompt;
  return render(messages, o, tools);
}

std::string ChatPrompt::render(const nlohmann::ordered_json& messages, const ChatOptions& options,
                               const nlohmann::ordered_json& tools) const {
  nlohmann::ordered_json vars = {{"messages", messages},
                                 {"add_generation_prompt", options.add_generation_prompt},
                                 {"bos_token", tokenizer_.bos_text()},
                                 {"eos_token", tokenizer_.eos_text()}};
  if (!tools.is_null()) vars["tools"] = tools;
  if (options.vars.is_object()) {
    for (const auto& [k, v] : options.vars.items()) vars[k] = v;
  }
  std::string text = template_.render(vars);
  if (!options.continue_final_message || !messages.is_array() || messages.empty()) return text;
  // transformers' rule: the last occurrence of the final content, stripped; its leading-trimmed
  // length kept where the template kept its trailing spaces, else the stripped length.
  // (A message without a string content continues after nothing of its own: the whole text.)
  const nlohmann::ordered_json& last = messages.back();
  const auto c = last.is_object() ? last.find("content") : last.end();
  const std::string content =
      c != last.end() && c->is_string() ? c->get<std::string>() : std::string();
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = content.find_first_not_of(kSpace);
  const std::string lstripped = b == std::string::npos ? std::string() : content.substr(b);
  const size_t e = lstripped.find_last_not_of(kSpace);
  const std::string stripped = e == std::string::npos ? std::string() : lstripped.substr(0, e + 1);
  const size_t at = text.rfind(stripped);
  SAMPAN_CHECK(at != std::string::npos, ErrorCode::kInvalidArgument,
               "continue_final_message: the chat template's text does not hold the last "
               "message's content (the template changes it)");
  const bool kept = text.compare(at, lstripped.size(), lstripped) == 0;
  text.resize(at + (kept ? lstripped.size() : stripped.size()));
  return text;
}

std::vector<int32_t> ChatPrompt::encode(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& tools) const {
  return tokenizer_.encode(render(messages, add_generation_prompt, tools), false);
}

std::vector<int32_t> ChatPrompt::encode(const nlohmann::ordered_json& messages,
                                        const ChatOptions& options,
                                        const nlohmann::ordered_json& tools) const {
  return tokenizer_.encode(render(messages, options, tools), false);
}

}  // namespace sampan::cli
