// sampan render-chat --model DIR|--template FILE --messages FILE.json [--tools FILE.json]
//                    [--add-generation-prompt] [--bos-token S] [--eos-token S] [--vars FILE.json]
// Prints the prompt the model's chat template renders for the conversation, byte for byte as
// transformers' apply_chat_template(tokenize=False) does, with nothing added.
// --vars names a JSON object whose keys become template variables too, as the extra keyword
// arguments of apply_chat_template do (documents=..., enable_thinking=..., or any value a test
// wants the template to see); they are set last, so they override the other options' variables.
// With --vars, --messages may be left out (then `messages` is whatever --vars gives, if anything).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "engine/chat/chat_template.h"
#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/commands.h"

namespace sampan::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SAMPAN_CHECK(in.good(), ErrorCode::kNotFound, "{}: cannot open file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json read_json(const std::string& path) {
  const std::string text = read_text(path);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    fail(ErrorCode::kInvalidArgument, "{}: invalid JSON: {}", path, e.what());
  }
}

// bos_token / eos_token may be a string or an AddedToken object {"content": ...}.
std::optional<std::string> token_string(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Runner add_render_chat(CLI::App& app) {
  struct Args {
    std::string model, template_file, messages, tools, vars;
    bool add_generation_prompt = false;
    std::optional<std::string> bos, eos;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("render-chat", "Print the prompt a chat template renders for a conversation");
  auto* model = cmd->add_option("--model", a->model, "model directory (tokenizer_config.json or chat_template.jinja) or .gguf file");
  auto* tmpl = cmd->add_option("--template", a->template_file, "chat template file (Jinja)");
  model->excludes(tmpl);
  cmd->add_option("--messages", a->messages, "JSON file holding the list of messages");
  cmd->add_option("--tools", a->tools, "JSON file holding the list of tools");
  cmd->add_flag("--add-generation-prompt", a->add_generation_prompt, "end with the assistant turn's opening");
  cmd->add_option("--bos-token", a->bos, "beginning-of-sequence string (default: from the model)");
  cmd->add_option("--eos-token", a->eos, "end-of-sequence string (default: from the model)");
  cmd->add_option("--vars", a->vars, "JSON file holding an object of extra template variables (set last)");
  return [a] {
    SAMPAN_CHECK(!a->model.empty() || !a->template_file.empty(), ErrorCode::kInvalidArgument,
                 "render-chat: give --model DIR or --template FILE");
    SAMPAN_CHECK(!a->messages.empty() || !a->vars.empty(), ErrorCode::kInvalidArgument,
                 "render-chat: give --messages FILE.json (or --vars FILE.json)");
    std::string source, name;
    std::optional<std::string> bos = a->bos, eos = a->eos;
    if (!a->template_file.empty()) {
      source = read_text(a->template_file);
      name = a->template_file;
    } else if (std::filesystem::path(a->model).extension() == ".gguf") {
      // A GGUF model carries its template and special tokens in the metadata.
      const auto tok = tok::load_tokenizer(a->model);
      source = tok->chat_template();
      SAMPAN_CHECK(!source.empty(), ErrorCode::kNotFound,
                   "{}: no chat template (no tokenizer.chat_template in the metadata)", a->model);
      name = a->model + ":tokenizer.chat_template";
      if (!bos) bos = tok->bos_text();
      if (!eos) eos = tok->eos_text();
    } else {
      namespace fs = std::filesystem;
      const fs::path dir(a->model);
      const fs::path config_path = dir / "tokenizer_config.json";
      Json config = Json::object();
      if (fs::exists(config_path)) config = read_json(config_path.string());
      if (!bos) bos = token_string(config, "bos_token");
      if (!eos) eos = token_string(config, "eos_token");
      auto it = config.find("chat_template");
      if (it != config.end() && it->is_string()) {
        source = it->get<std::string>();
        name = config_path.string();
      } else if (it != config.end() && it->is_array()) {
        for (const auto& entry : *it) {
          if (entry.contains("name") && entry["name"] == "default" && entry.contains("template") &&
              entry["template"].is_string())
            source = entry["template"].get<std::string>();
        }
        SAMPAN_CHECK(!source.empty(), ErrorCode::kNotFound, "{}: chat_template has no template named 'default'",
                     config_path.string());
        name = config_path.string();
      } else {
        const fs::path jinja = dir / "chat_template.jinja";
        SAMPAN_CHECK(fs::exists(jinja), ErrorCode::kNotFound,
                     "{}: no chat template (neither tokenizer_config.json \"chat_template\" nor chat_template.jinja)",
                     a->model);
        source = read_text(jinja.string());
        name = jinja.string();
      }
    }
    Json vars = Json::object();
    if (!a->messages.empty()) {
      vars["messages"] = read_json(a->messages);
      SAMPAN_CHECK(vars["messages"].is_array(), ErrorCode::kInvalidArgument, "{}: expected a JSON list of messages",
                   a->messages);
    }
    if (!a->tools.empty()) vars["tools"] = read_json(a->tools);
    vars["add_generation_prompt"] = a->add_generation_prompt;
    if (bos) vars["bos_token"] = *bos;
    if (eos) vars["eos_token"] = *eos;
    if (!a->vars.empty()) {
      const Json extra = read_json(a->vars);
      SAMPAN_CHECK(extra.is_object(), ErrorCode::kInvalidArgument, "{}: expected a JSON object of variables", a->vars);
      for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
    }
    const chat::Template t = chat::Template::parse(source, name);
    const std::string out = t.render(vars);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    return 0;
  };
}

}  // namespace sampan::cli
