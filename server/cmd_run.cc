// sampan run --model DIR --prompt TEXT [sampling flags]: streams the generated text to stdout.
// By default the prompt is completed as raw text (BOS added as the tokenizer says); --chat wraps
// it as a user message (and --system as a system message) in the model's chat template.
#include "engine/core/error.h"
#include "server/chat_prompt.h"
#include "server/commands.h"
#include "server/generation_flags.h"
#include "server/model_flags.h"

namespace sampan::cli {

Runner add_run(CLI::App& app) {
  struct Args {
    GenerationFlags gen;
    Device device;  // --device: model_flags.h (GenerationFlags holds only what both share)
    bool cuda_graphs = true;
    std::string lora;  // --lora DIR
    std::string prompt, system;
    bool chat = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt, streamed to stdout");
  a->gen.add_to(*cmd);
  add_device_flag(*cmd, &a->device);
  add_cuda_graphs_flag(*cmd, &a->cuda_graphs);
  add_lora_flag(*cmd, &a->lora);
  cmd->add_option("--prompt", a->prompt, "prompt text")->required();
  cmd->add_flag("--chat", a->chat, "apply the model's chat template to the prompt");
  cmd->add_option("--system", a->system, "system message (with --chat)");
  return [a] {
    auto tokenizer = tok::load_tokenizer(a->gen.model);
    std::vector<int32_t> prompt;
    if (a->chat) {
      nlohmann::ordered_json messages = nlohmann::ordered_json::array();
      if (!a->system.empty()) messages.push_back({{"role", "system"}, {"content", a->system}});
      messages.push_back({{"role", "user"}, {"content", a->prompt}});
      prompt = ChatPrompt(*tokenizer, a->gen.model).encode(messages, true);
    } else {
      SAMPAN_CHECK(a->system.empty(), ErrorCode::kInvalidArgument, "--system needs --chat");
      prompt = tokenizer->encode(a->prompt, true);
    }
    runtime::CausalLmOptions opt;
    opt.threads = a->gen.threads;
    opt.max_context = a->gen.max_context;
    opt.build = a->gen.build;
    load_lora_flag(a->lora, &opt.build);
    opt.device = a->device;
    opt.cuda_graphs = a->cuda_graphs;
    auto lm = runtime::CausalLm::load(a->gen.model, opt);
    SAMPAN_CHECK(tokenizer->vocab_size() <= lm->config().vocab_size, ErrorCode::kInvalidModel,
                 "{}: the tokenizer has {} tokens but the model's vocabulary is {}", a->gen.model,
                 tokenizer->vocab_size(), lm->config().vocab_size);
    const runtime::GenerationResult r = runtime::generate(
        *lm, *tokenizer, a->gen.request(prompt), [&](const runtime::GenerationEvent& ev) {
          print_event(ev, *tokenizer, a->gen.sampling.top_logprobs);
        });
    std::fputs("\n", stdout);
    if (a->gen.stats) print_stats(r);
    return 0;
  };
}

}  // namespace sampan::cli
