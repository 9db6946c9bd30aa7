// Decoding constrained by a byte grammar (grammar.h; a JSON schema compiles to one,
// json_schema.h): at every step only the tokens whose bytes keep the generated text a prefix of
// a text of the grammar are allowed, and the end-of-sequence ids only once the text is complete.
// A request that ends on its own (finish "stop") therefore produced a complete text; one cut
// short by max_tokens a prefix of one.
#pragma once

#include <array>
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
  // Marks in `ok` every token below trie node `node` that the grammar allows from `s`, until
  // `budget` (stack positions stepped) is spent: past it, the tokens not yet reached stay
  // disallowed. A schema built to keep many alternatives open (hundreds of identical anyOf
  // branches) then narrows the choice instead of stalling the engine for every request.
  void scan(uint32_t node, uint32_t state, std::vector<uint64_t>& ok, int64_t& budget);
  static constexpr int64_t kScanBudget = int64_t{1} << 19;

  // States met while scanning, interned, and the steps between them: most trie nodes lead to a
  // state already seen (inside a string every ASCII character returns to the same one), so a
  // scan is mostly lookups. Cleared between scans past kMaxStates states (1 KB each).
  uint32_t intern(GrammarState s);
  int32_t next_state(uint32_t state, uint8_t byte, int64_t& budget);  // -1: refused
  static constexpr size_t kMaxStates = 1024;
  static constexpr int32_t kUnknown = -2;
  std::vector<GrammarState> states_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> state_ids_;  // hash -> ids
  std::vector<std::array<int32_t, 256>> steps_;  // [state][byte] -> next, -1, or kUnknown

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
