// JSON mode (OpenAI response_format {"type": "json_object"}): at every step only the tokens whose
// bytes keep the generated text a prefix of a JSON object are allowed (json_grammar.h), and the
// end-of-sequence ids only once the object is complete (then nothing else is). The output of a
// request that ends on its own (finish "stop") is therefore one JSON object; one cut short by
// max_tokens is a prefix of one.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/runtime/json_grammar.h"
#include "engine/runtime/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace sampan::runtime {

// The bytes each token adds to a generated text, as StreamDecoder would emit them after another
// token (a SentencePiece word piece's leading space included: JSON takes it as whitespace).
// Special tokens and tokens that add nothing have no bytes and are never allowed in JSON.
// Built once per tokenizer (one decode per id: ~50 ms for 128k ids).
struct TokenBytes {
  std::vector<std::string> bytes;  // [vocab]
  // The non-empty byte strings as a trie (node 0 the root): a grammar walks each shared prefix
  // once (grammar_constraint.h).
  struct TrieNode {
    std::vector<std::pair<uint8_t, uint32_t>> children;  // (byte, node)
    std::vector<int32_t> ids;                            // tokens whose bytes end here
  };
  std::vector<TrieNode> trie;
  // Builds `trie` from `bytes` (build() does; a hand-made table calls it itself).
  void build_trie();
  static std::shared_ptr<const TokenBytes> build(const tok::Tokenizer& tokenizer);
};

// logits: [vocab'] -> -inf for every id whose bit in `ok` (a bit per id of a `vocab`-id table)
// is clear, and for ids past the table; when nothing allowed is left finite, the end ids get 0
// (the text ends as a prefix rather than nothing being left to sample).
void mask_logits(std::span<float> logits, const std::vector<uint64_t>& ok, size_t vocab,
                 const std::vector<int32_t>& eos_ids);

class JsonConstraint final : public TokenConstraint {
 public:
  // eos_ids: the ids that may end the text once the object is complete (at least one).
  JsonConstraint(std::shared_ptr<const TokenBytes> vocab, std::vector<int32_t> eos_ids);

  // logits: [vocab] -> -inf for every id not allowed after the text so far.
  void mask(std::span<float> logits) override;
  // The sampled id: advances the state (an id mask() did not allow throws kInternal).
  void accept(int32_t id) override;

  const JsonState& state() const { return state_; }
  bool done() const { return json_done(state_); }
  // Whether `id` may follow the text so far (what mask() keeps).
  bool allowed(int32_t id) const;

 private:
  // A bit per id.
  const std::vector<uint64_t>& allowed_ids();

  std::shared_ptr<const TokenBytes> vocab_;
  std::vector<int32_t> eos_ids_;
  JsonState state_;
  // Allowed ids (a bit per id) by state, at most kMemoStates of them (16 KB each at a 128k
  // vocabulary): a generation revisits few states (inside a string at the same depth, after a
  // comma, ...), and each scan of the vocabulary costs ~1 ms.
  static constexpr size_t kMemoStates = 64;
  std::unordered_map<uint64_t, std::pair<JsonState, std::vector<uint64_t>>> memo_;
};

}  // namespace sampan::runtime
