// tokenizer.json loading, encoding and decoding. The first byte picks the mode:
//   0: the rest is a tokenizer.json, loaded (small hand-made seeds: real ones are megabytes);
//   else: the rest is text, encoded with and without special tokens by one of the committed
//   real tokenizers (byte-level BPE, SentencePiece BPE with byte fallback, WordPiece), and the
//   input's bytes read as token ids are decoded, whole and streamed.
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::vector<std::unique_ptr<sampan::tok::Tokenizer>>& tokenizers() {
  static std::vector<std::unique_ptr<sampan::tok::Tokenizer>> all = [] {
    std::vector<std::unique_ptr<sampan::tok::Tokenizer>> v;
    for (const char* name : {"gpt-2", "llama-spm", "bert-bge", "phi-3", "deepseek-llm", "falcon"}) {
      v.push_back(sampan::tok::load_tokenizer(
          (sampan::fuzz::source_dir() / "tests/data/tokenizers" / name / "tokenizer.json").string()));
    }
    return v;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizers();  // loaded once, outside the timed runs
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = sampan::fuzz::as_text(data + 1, size - 1);
  if (data[0] == 0) {
    try {
      const auto tok = sampan::tok::load_tokenizer(sampan::fuzz::write_temp("tokenizer.json", rest));
      const auto ids = tok->encode("Hello world! \xF0\x9F\x98\x80 12345  \n\tend", true);
      (void)tok->decode(ids, false);
    } catch (const sampan::Error&) {
    }
    return 0;
  }
  const auto& tok = *tokenizers()[data[0] % tokenizers().size()];
  (void)tok.encode(rest, false);
  const auto ids = tok.encode(rest, true);
  (void)tok.decode(ids, false);
  // The input's bytes as ids (3 bytes each), in and out of the vocabulary.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 3 <= rest.size(); i += 3) {
    raw.push_back(static_cast<int32_t>(static_cast<uint8_t>(rest[i]) |
                                       static_cast<uint8_t>(rest[i + 1]) << 8 |
                                       static_cast<uint8_t>(rest[i + 2]) << 16) %
                  static_cast<int32_t>(tok.vocab_size() + 8));
  }
  try {
    (void)tok.decode(raw, false);
    (void)tok.decode(raw, true);
  } catch (const sampan::Error&) {
  }
  try {
    sampan::tok::StreamDecoder stream(tok);
    for (int32_t id : raw) (void)stream.push(id);
    (void)stream.flush();
  } catch (const sampan::Error&) {
  }
  return 0;
}
