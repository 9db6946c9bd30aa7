// sampan chat --model DIR [sampling flags]: an interactive chat with the model's template.
// Reads one user message per line from stdin; "/reset" clears the conversation, "/system TEXT"
// sets the system message, "/exit" (or end of input) quits. Each turn re-renders the whole
// conversation; the KV cache of the unchanged prefix is reused, so only the new turn is computed.
#include <unistd.h>

#include <iostream>

#include "engine/core/error.h"
#include "server/chat_prompt.h"
#include "server/commands.h"
#include "server/generation_flags.h"
#include "server/model_flags.h"

namespace sampan::cli {

Runner add_chat(CLI::App& app) {
  struct Args {
    GenerationFlags gen;
    Device device;  // --device: model_flags.h (GenerationFlags holds only what both share)
    bool cuda_graphs = true;
    std::string lora;  // --lora DIR
    std::string system;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("chat", "Chat with the model interactively (one message per line)");
  a->gen.add_to(*cmd);
  add_device_flag(*cmd, &a->device);
  add_cuda_graphs_flag(*cmd, &a->cuda_graphs);
  add_lora_flag(*cmd, &a->lora);
  cmd->add_option("--system", a->system, "system message");
  return [a] {
    auto tokenizer = tok::load_tokenizer(a->gen.model);
    ChatPrompt chat(*tokenizer, a->gen.model);
    runtime::CausalLmOptions opt;
    opt.threads = a->gen.threads;
    opt.max_context = a->gen.max_context;
    opt.build = a->gen.build;
    load_lora_flag(a->lora, &opt.build);
    opt.device = a->device;
    opt.cuda_graphs = a->cuda_graphs;
    auto lm = runtime::CausalLm::load(a->gen.model, opt);
    const bool interactive = isatty(STDIN_FILENO);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    std::string system = a->system;
    auto reset = [&] {
      messages = nlohmann::ordered_json::array();
      if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    };
    reset();
    std::string line;
    uint64_t turn = 0;
    for (;;) {
      if (interactive) std::fputs("> ", stderr);
      if (!std::getline(std::cin, line) || line == "/exit") break;
      if (line.empty()) continue;
      if (line == "/reset") {
        reset();
        continue;
      }
      if (line.rfind("/system ", 0) == 0) {
        system = line.substr(8);
        reset();
        continue;
      }
      messages.push_back({{"role", "user"}, {"content", line}});
      std::vector<int32_t> prompt;
      try {
        prompt = chat.encode(messages, true);
      } catch (const Error& e) {
        messages.erase(messages.end() - 1);  // keep the conversation usable
        std::fprintf(stderr, "error: %s\n", e.what());
        continue;
      }
      if (static_cast<int64_t>(prompt.size()) + 1 >= lm->capacity()) {
        std::fprintf(stderr, "error: the conversation (%zu tokens) fills the context of %lld; "
                             "use /reset or a larger --max-context\n",
                     prompt.size(), static_cast<long long>(lm->capacity()));
        messages.erase(messages.end() - 1);
        continue;
      }
      // With --seed, turn t samples with seed + t: the session is reproducible, yet two turns
      // that end in the same context do not repeat each other word for word.
      runtime::GenerationRequest request = a->gen.request(prompt);
      if (request.sampling.seed) *request.sampling.seed += turn;
      ++turn;
      const runtime::GenerationResult r = runtime::generate(
          *lm, *tokenizer, request, [&](const runtime::GenerationEvent& ev) {
            print_event(ev, *tokenizer, a->gen.sampling.top_logprobs);
          });
      std::fputs("\n", stdout);
      std::fflush(stdout);
      if (a->gen.stats) print_stats(r);
      messages.push_back({{"role", "assistant"}, {"content", r.text}});
    }
    return 0;
  };
}

}  // namespace sampan::cli
