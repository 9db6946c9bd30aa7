// sampan tokenize (--model DIR | --tokenizer FILE) (--text TEXT... | --decode 1,2,3) [--add-special]
//                [--split]
// Prints the token ids on one line separated by single spaces, or with --decode the decoded
// text; either is followed by one newline and nothing else reaches stdout. --text may be given
// several times: one line of ids per text, in order (one process loads the tokenizer once).
// --split prints, instead of ids, each text's pre-tokenized pieces (Tokenizer::pre_tokenize: added
// tokens as their own pieces, the rest normalized and split by the pre-tokenizer, byte-level
// pieces as raw UTF-8) as one JSON array of strings per line, ASCII-only with \u escapes; bytes
// that are not valid UTF-8 on their own come out as U+FFFD. The end-to-end tokenizer tests depend
// on this interface: keep it stable.
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/commands.h"

namespace sampan::cli {

Runner add_tokenize(CLI::App& app) {
  struct Args {
    std::string model, tokenizer, decode;
    std::vector<std::string> texts;
    bool add_special = false, split = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (or decode ids)");
  auto* model = cmd->add_option("--model", a->model, "model directory holding tokenizer.json");
  auto* file = cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json or .gguf file");
  model->excludes(file);
  auto* text = cmd->add_option("--text", a->texts, "text to encode (repeatable: one line of ids per text)")
                   ->allow_extra_args(false);
  auto* decode = cmd->add_option("--decode", a->decode, "comma-separated ids to decode instead");
  text->excludes(decode);
  cmd->add_flag("--add-special", a->add_special, "add BOS/EOS ([CLS]/[SEP]) as the tokenizer does");
  auto* split = cmd->add_flag("--split", a->split,
                              "print each text's pre-tokenized pieces (a JSON array of strings per line) instead of ids");
  split->excludes(decode);
  return [a, model, file, text, decode] {
    SAMPAN_CHECK(*model || *file, ErrorCode::kInvalidArgument, "tokenize: give --model DIR or --tokenizer FILE");
    SAMPAN_CHECK(*text || *decode, ErrorCode::kInvalidArgument, "tokenize: give --text TEXT or --decode IDS");
    auto tok = tok::load_tokenizer(*model ? a->model : a->tokenizer);
    if (*decode) {
      const std::vector<int32_t> ids = parse_ids(a->decode);
      std::cout << tok->decode(ids, false) << '\n';
      return 0;
    }
    std::string out;
    if (a->split) {
      for (const std::string& text : a->texts) {
        const nlohmann::json pieces = tok->pre_tokenize(text);
        out += pieces.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
        out += '\n';
      }
      std::cout << out;
      return 0;
    }
    for (const std::string& text : a->texts) {
      const std::vector<int32_t> ids = tok->encode(text, a->add_special);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ' ';
        out += std::to_string(ids[i]);
      }
      out += '\n';
    }
    std::cout << out;
    return 0;
  };
}

}  // namespace sampan::cli
