// Finetuning data: JSON lines in the three forms `sampan finetune --data` takes, tokenized into
// training examples with a loss mask, and packed into fixed-shape batches for LoraTrainer.
//
//   {"text": "..."}                          loss on every token
//   {"prompt": "...", "completion": "..."}   loss on the completion's tokens only
//   {"messages": [{"role": ..., "content": ...}, ...]}
//                                            the model's chat template applied; loss on the
//                                            assistant turns only
// Each example starts with the tokenizer's BOS where the model's tokenizer adds one (and the
// template does not already) and, for "text" and "prompt"/"completion", ends with EOS (what the
// model must learn to stop).
// An example longer than seq_len tokens is truncated to its first seq_len tokens (counted in
// DatasetStats::truncated, and said in the finetune summary); one with no loss token left is
// dropped (counted in DatasetStats::dropped).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/lora_trainer.h"

namespace sampan::tok {
class Tokenizer;
}
namespace sampan::chat {
class Template;
}

namespace sampan::train {

struct Example {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss;  // [ids.size()]: 1 where ids[t] is a token the loss predicts
  int64_t line = 0;           // 1-based line of the data file
};

struct DatasetStats {
  int64_t lines = 0;      // non-blank lines read
  int64_t examples = 0;   // kept
  int64_t truncated = 0;  // longer than seq_len, cut to it
  int64_t dropped = 0;    // no loss token (after truncation)
  int64_t tokens = 0;     // tokens of the kept examples
  int64_t loss_tokens = 0;
};

// Reads `path`. Errors are one line naming the file and line: bad JSON ("data.jsonl:7: not JSON:
// ..."), a line that is not an object, none of the three forms, a field of the wrong type, a
// message without role/content, a "messages" example without an assistant turn, an empty file.
// `chat` may be null; then a "messages" line is an error naming it.
std::vector<Example> load_examples(const std::string& path, const tok::Tokenizer& tokenizer,
                                   const chat::Template* chat, int64_t seq_len,
                                   DatasetStats* stats);

// Batches of `batch_size` examples (the last one may be smaller), in an order shuffled by `rng`
// once per epoch; each row padded to the longest row of its batch. targets[t] = ids[t + 1] where
// loss[t + 1], else kIgnoreIndex.
TrainBatch make_batch(const std::vector<Example>& examples, const std::vector<size_t>& rows);

}  // namespace sampan::train
