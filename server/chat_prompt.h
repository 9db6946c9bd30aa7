// Renders a conversation with the model's chat template and tokenises it, as HF
// apply_chat_template(..., tokenize=True) does: the template places BOS itself, so no special
// tokens are added when encoding.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace sampan::cli {

class ChatPrompt {
 public:
  // Throws Error(kNotFound) naming the model when its tokenizer has no chat template.
  ChatPrompt(const tok::Tokenizer& tokenizer, const std::string& model_dir);
  // `tools`: null (the template sees no `tools` variable) or the list handed to it as `tools`.
  std::vector<int32_t> encode(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                              const nlohmann::ordered_json& tools = nullptr) const;
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr) const;

 private:
  const tok::Tokenizer& tokenizer_;
  chat::Template template_;
};

}  // namespace sampan::cli
