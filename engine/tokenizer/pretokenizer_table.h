// The pre-tokenizer of every `tokenizer.ggml.pre` name llama.cpp knows, described as the
// tokenizer.json of that family would describe it, so a GGUF vocabulary and the model's own
// tokenizer.json run the same pipeline (tokenizer_gguf.cc feeds this to the JSON reader).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sampan::tok {

struct GgufPreTokenizer {
  // How the text reaches the BPE model.
  enum class Text {
    kByteLevel,  // GPT-2 byte-to-character mapping after the splits (nearly every family)
    kMetaspace,  // raw UTF-8 with spaces written as U+2581, byte fallback (Gemma 4 style)
    kRaw,        // raw UTF-8 words, whitespace dropped (the "whitespace" pre-tokenizer)
  };
  nlohmann::json pre_tokenizer;  // tokenizer.json "pre_tokenizer" object
  Text text = Text::kByteLevel;
  // The family's tokenizer.json sets "ignore_merges": a word that is itself a token is not merged.
  bool ignore_merges = false;
  // llama.cpp adds BOS for this type when the file has no tokenizer.ggml.add_bos_token (it
  // sets add_bos per type while reading the vocabulary); the key, when present, wins.
  bool add_bos = false;
  // llama.cpp adds BOS for this type whatever the key says (Gemma 4-style vocabularies).
  bool force_bos = false;
};

// nullopt when `name` is not a pre-tokenizer type llama.cpp knows. "" is llama.cpp's fallback
// for files converted before the key existed.
std::optional<GgufPreTokenizer> gguf_pre_tokenizer(std::string_view name);

// Every name gguf_pre_tokenizer accepts (for tests and error messages).
std::vector<std::string> gguf_pre_tokenizer_names();

}  // namespace sampan::tok
