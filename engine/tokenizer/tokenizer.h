// Tokenizers: text <-> token ids, loaded from a Hugging Face tokenizer.json (+ the
// tokenizer_config.json beside it) or from a GGUF file's tokenizer metadata.
//
// Families: byte-level BPE (GPT-2, Llama 3, Qwen2, DeepSeek, Falcon and every other pre-tokenizer
// llama.cpp names in tokenizer.ggml.pre: pretokenizer_table.cc), SentencePiece-
// style BPE with byte fallback (Llama 2, Mistral, Phi-3), WordPiece (BERT). Added/special tokens
// are matched in the input text before the model runs (as HF does). Results are exactly those of
// HF `tokenizers` and llama.cpp's reference vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sampan::tok {

enum class TokenizerKind { kByteLevelBpe, kSentencePieceBpe, kWordPiece };

struct SpecialTokens {
  std::optional<int32_t> bos, eos, unk, pad, sep, cls, mask;
  // Every id that ends generation: eos plus e.g. <|eot_id|>, <|im_end|>, <|end|> where the
  // tokenizer or config names them.
  std::vector<int32_t> eos_ids;
  bool add_bos = false;  // encode(..., add_special=true) prepends bos
  bool add_eos = false;  // ... and appends eos
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual TokenizerKind kind() const = 0;
  // add_special: add BOS/EOS (or [CLS]/[SEP] for WordPiece) as the tokenizer's post-processor
  // does. Special-token text inside `text` is always recognised as that token.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
  // The pieces `text` is cut into before the model runs, for inspection (`sampan tokenize
  // --split`): added/special tokens found in the text are pieces of their own (their text);
  // every other segment is normalized and pre-tokenized. Byte-level tokenizers give the pieces
  // as raw UTF-8, not in the byte-to-character alphabet the model sees (a pre-tokenizer step
  // after ByteLevel that splits inside a character, as Falcon's digit split can, leaves pieces
  // that are not valid UTF-8 on their own).
  virtual std::vector<std::string> pre_tokenize(std::string_view text) const = 0;
  // Joins tokens and applies the decoder (byte-level bytes, SentencePiece "▁" and byte
  // fallback, WordPiece "##"). Invalid UTF-8 produced by a cut sequence is kept as is (bytes).
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;

  virtual int64_t vocab_size() const = 0;
  // The vocabulary string of a token as stored (e.g. "Ġhello", "▁the", "<0x0A>", "##ing").
  virtual std::string_view token_text(int32_t id) const = 0;
  virtual std::optional<int32_t> token_id(std::string_view text) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual const SpecialTokens& special() const = 0;
  // The chat template shipped with the tokenizer (tokenizer_config.json "chat_template",
  // chat_template.jinja, or GGUF tokenizer.chat_template); empty when none.
  virtual const std::string& chat_template() const = 0;
  // Token strings for template variables (e.g. "<s>", "</s>"); empty when none.
  virtual std::string bos_text() const = 0;
  virtual std::string eos_text() const = 0;
};

// `path` is a model directory (tokenizer.json [+ tokenizer_config.json, chat_template.jinja]),
// a tokenizer.json file, or a .gguf file. Errors are one line naming the file and what is wrong
// (Error kInvalidModel / kUnsupported / kNotFound).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// Streaming detokenisation: feed ids one at a time, get back only text that is final — never
// half a UTF-8 character, and with SentencePiece's leading-space rule applied as decode() of the
// whole sequence would. The concatenation of every push() and flush() equals decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  std::string push(int32_t id);
  std::string flush();  // whatever is held back (incomplete UTF-8 at the very end)

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t emitted_ = 0;  // bytes of decode(ids_) already returned
};

}  // namespace sampan::tok
