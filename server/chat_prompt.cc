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
  nlohmann::ordered_json vars = {{"messages", messages},
                                 {"add_generation_prompt", add_generation_prompt},
                                 {"bos_token", tokenizer_.bos_text()},
                                 {"eos_token", tokenizer_.eos_text()}};
  if (!tools.is_null()) vars["tools"] = tools;
  return template_.render(vars);
}

std::vector<int32_t> ChatPrompt::encode(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& tools) const {
  return tokenizer_.encode(render(messages, add_generation_prompt, tools), false);
}

}  // namespace sampan::cli
