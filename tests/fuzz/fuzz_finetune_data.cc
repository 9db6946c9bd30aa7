// Finetuning data files (train/dataset.h): the input is a JSON-lines file, read in all three
// forms (text, prompt/completion, messages through a chat template) and batched. The first byte
// picks the --seq-len (2..257), so truncation and dropping meet every length.
#include <numeric>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/train/dataset.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const sampan::tok::Tokenizer& tokenizer() {
  static const auto tok = sampan::tok::load_tokenizer(
      (sampan::fuzz::source_dir() / "tests/data/tokenizers/llama-spm/tokenizer.json").string());
  return *tok;
}

const sampan::chat::Template& chat_template() {
  static const auto tmpl = sampan::chat::Template::parse(
      "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n"
      "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}",
      "fuzz");
  return tmpl;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer();
  chat_template();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t seq_len = 2 + data[0];
  const std::string path =
      sampan::fuzz::write_temp("data.jsonl", sampan::fuzz::as_text(data + 1, size - 1));
  try {
    sampan::train::DatasetStats stats;
    const auto examples =
        sampan::train::load_examples(path, tokenizer(), &chat_template(), seq_len, &stats);
    if (stats.examples != static_cast<int64_t>(examples.size())) std::abort();
    std::vector<size_t> rows(std::min<size_t>(examples.size(), 4));
    std::iota(rows.begin(), rows.end(), size_t{0});
    const auto batch = sampan::train::make_batch(examples, rows);
    if (batch.ids.size() != batch.targets.size()) std::abort();
    for (const auto& ex : examples) {
      if (static_cast<int64_t>(ex.ids.size()) > seq_len || ex.ids.size() != ex.loss.size()) {
        std::abort();
      }
    }
  } catch (const sampan::Error&) {
  }
  return 0;
}
