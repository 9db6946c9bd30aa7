// What the HTTP and gRPC front ends serve: a language model's engine or a classic model's tensor
// session (neither until the model has loaded, so the servers can answer liveness probes during
// a long load), its public name, the chat template and the server-wide request defaults.
// Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/tensor_session.h"
#include "server/chat_prompt.h"
#include "server/tool_parser.h"

namespace sampan::server {

class ModelHost {
 public:
  explicit ModelHost(std::string served_name, int64_t default_max_tokens)
      : name_(std::move(served_name)), default_max_tokens_(default_max_tokens) {}

  // The loaded engine, or null while loading (answer 503 / UNAVAILABLE then).
  std::shared_ptr<runtime::Engine> engine() const {
    std::lock_guard<std::mutex> lock(mu_);
    return engine_;
  }
  // The chat template renderer, or null when the model has none (chat requests get 400).
  std::shared_ptr<const cli::ChatPrompt> chat() const {
    std::lock_guard<std::mutex> lock(mu_);
    return chat_;
  }
  // `tool_calls`: how tool calls are read out of chat replies (tool_choice "auto").
  void set_loaded(std::shared_ptr<runtime::Engine> engine,
                  std::shared_ptr<const cli::ChatPrompt> chat,
                  ToolCallFormat tool_calls = ToolCallFormat::kNone) {
    std::lock_guard<std::mutex> lock(mu_);
    engine_ = std::move(engine);
    chat_ = std::move(chat);
    tool_calls_ = tool_calls;
  }
  ToolCallFormat tool_call_format() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tool_calls_;
  }
  // The classic model's session (`sampan serve --model FILE.onnx`), or null: an LLM is served,
  // or nothing has loaded yet. Only KServe v2 infer serves it.
  std::shared_ptr<runtime::TensorSession> tensor_session() const {
    std::lock_guard<std::mutex> lock(mu_);
    return session_;
  }
  void set_tensor_session(std::shared_ptr<runtime::TensorSession> session) {
    std::lock_guard<std::mutex> lock(mu_);
    session_ = std::move(session);
  }
  // Loaded (an engine or a tensor session).
  bool loaded() const {
    std::lock_guard<std::mutex> lock(mu_);
    return engine_ != nullptr || session_ != nullptr;
  }
  const std::string& name() const { return name_; }

  // The LoRA adapters served next to the base (serve --lora NAME=DIR), by engine adapter index.
  // Set once before the front ends start; read-only afterwards.
  void set_adapters(std::vector<std::string> names) { adapters_ = std::move(names); }
  const std::vector<std::string>& adapters() const { return adapters_; }
  // The model name of adapter `lora` (-1: the base's), as responses name it.
  const std::string& model_name(int32_t lora) const {
    return lora >= 0 ? adapters_.at(static_cast<size_t>(lora)) : name_;
  }
  // What a request's model name selects: -1 the base model, 0.. an adapter, nullopt neither.
  std::optional<int32_t> lora_index(const std::string& model) const {
    if (model == name_) return -1;
    for (size_t i = 0; i < adapters_.size(); ++i) {
      if (adapters_[i] == model) return static_cast<int32_t>(i);
    }
    return std::nullopt;
  }
  int64_t default_max_tokens() const { return default_max_tokens_; }

  bool ready() const { return loaded() && !draining_.load(); }
  // SIGTERM received: readiness goes false, new generation requests get 503 / UNAVAILABLE.
  void set_draining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<runtime::Engine> engine_;
  std::shared_ptr<const cli::ChatPrompt> chat_;
  ToolCallFormat tool_calls_ = ToolCallFormat::kNone;
  std::shared_ptr<runtime::TensorSession> session_;
  std::string name_;
  std::vector<std::string> adapters_;
  int64_t default_max_tokens_;
  std::atomic<bool> draining_{false};
};

}  // namespace sampan::server
