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

// How a conversation is rendered beyond its messages and tools (vLLM's chat request fields).
struct ChatOptions {
  bool add_generation_prompt = true;
  // The text ends where the last message's content ends (its turn left open for the model to
  // continue), cut as transformers' continue_final_message cuts it; with add_generation_prompt
  // false. Error(kInvalidArgument) when the rendered text does not hold that content.
  bool continue_final_message = false;
  // Template variables set after the standard ones (chat_template_kwargs, documents): null or
  // an object.
  nlohmann::ordered_json vars;
};

class ChatPrompt {
 public:
  // Throws Error(kNotFound) naming the model when its tokenizer has no chat template.
  ChatPrompt(const tok::Tokenizer& tokenizer, const std::string& model_dir);
  // `tools`: null (the template sees no `tools` variable) or the list handed to it as `tools`.
  std::vector<int32_t> encode(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                              const nlohmann::ordered_json& tools = nullptr) const;
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr) const;
  std::string render(const nlohmann::ordered_json& messages, const ChatOptions& options,
                     const nlohmann::ordered_json& tools = nullptr) const;
  std::vector<int32_t> encode(const nlohmann::ordered_json& messages, const ChatOptions& options,
                              const nlohmann::ordered_json& tools = nullptr) const;

 private:
  const tok::Tokenizer& tokenizer_;
  chat::Template template_;
};

}  // namespace sampan::cli
