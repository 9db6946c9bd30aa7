// `sampan bench-serve`: the prompts a run sends. Synthetic prompts are random sequences of common
// English words, each a single token (with its leading space) in the usual BPE and SentencePiece
// vocabularies, so a server tokenizes an N-word prompt to about N tokens (plus BOS or template
// tokens) without the client knowing its tokenizer; random order keeps the prefix cache from
// short-cutting prefill. A JSONL dataset gives one prompt per line.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace sampan::bench {

struct ChatTurn {
  std::string role, content;
};

struct Prompt {
  std::string text;               // used when `messages` is empty
  std::vector<ChatTurn> messages;  // a chat conversation (dataset "messages")
  int64_t max_tokens = 1;
  int64_t expected_input_tokens = -1;  // synthetic: the word count; -1 for dataset prompts
};

struct SyntheticOptions {
  int64_t input_len = 128;     // mean prompt length (words ~ tokens)
  int64_t output_len = 128;    // mean max_tokens
  double input_range = 0;      // lengths uniform in [len * (1 - r), len * (1 + r)], r in [0, 1)
  double output_range = 0;
  uint64_t seed = 0;
};

// Yields the prompts of a run in order: synthetic ones drawn one by one, dataset lines in file
// order, starting over at the end.
class Workload {
 public:
  static Workload synthetic(const SyntheticOptions& options);
  // Reads FILE.jsonl: one JSON object per line with "prompt" (string) or "messages" (array of
  // {"role", "content"}), optional "max_tokens" (else `default_max_tokens`). Blank lines are
  // skipped. Throws Error(kInvalidArgument) naming the line of anything else, kNotFound / kIo
  // for an unreadable file.
  static Workload from_jsonl(const std::string& path, int64_t default_max_tokens);

  Prompt next();
  // Number of dataset prompts; 0 for synthetic workloads.
  size_t dataset_size() const { return dataset_.size(); }
  bool has_chat_prompts() const;

 private:
  std::optional<SyntheticOptions> synthetic_;
  std::mt19937_64 rng_;
  std::vector<Prompt> dataset_;
  size_t next_ = 0;
};

// The vocabulary synthetic prompts draw from (exposed for tests).
const std::vector<std::string>& synthetic_words();

// Length drawn uniformly from [mean * (1 - range), mean * (1 + range)], at least 1.
int64_t draw_length(int64_t mean, double range, std::mt19937_64& rng);

}  // namespace sampan::bench
