// Decoding constrained by a byte grammar (grammar.h; a JSON schema compiles to one,
// json_schema.h): at every step only the tokens whose bytes keep the generated text a prefix of
// a text of the grammar are allowed, and the end-of-sequence ids only once the text is complete.
// A request that ends on its own (finish "stop") therefore produced a complete text; one cut
// short by max_tokens a prefix of one.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/runtime/grammar.h"
#include "engine/runtime/json_constraint.h"
#include "engine/runtime/sampler.h"

namespace sampan::runtime {

class GrammarConstraint final : public TokenConstraint {
 public:
  // vocab: each token's bytes (its trie walked per new state). eos_ids: at least one. `what`
  // names the request field in errors ("response_format").
  GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                    std::shared_ptr<const TokenBytes> vocab, std::vector<int32_t> eos_ids,
                    std::string what);

  // logits: [vocab] -> -inf for every id not allowed after the text so far.
  void mask(std::span<float> logits) override;
  // The sampled id: advances the state (an id mask() did not allow throws kInternal).
  void accept(int32_t id) override;

  bool done() const { return matcher_.done(state_); }
  // Whether `id` may follow the text so far (what mask() keeps).
  bool allowed(int32_t id) const;

 private:
  const std::vector<uint64_t>& allowed_ids();
  // Marks in `ok` every token below trie node `node` that the grammar allows from `s`.
  void scan(uint32_t node, const GrammarState& s, std::vector<uint64_t>& ok) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenBytes> vocab_;
  std::vector<int32_t> eos_ids_;
  std::string what_;
  GrammarMatcher matcher_;
  GrammarState state_;
  // Allowed ids (a bit per id) by state, at most kMemoStates of them: inside an unbounded
  // string, for one, every character leads back to the same state.
  static constexpr size_t kMemoStates = 64;
  std::unordered_map<uint64_t, std::pair<GrammarState, std::vector<uint64_t>>> memo_;
};

}  // namespace sampan::runtime
