#include "engine/runtime/grammar_constraint.h"

#include <algorithm>

#include "engine/core/error.h"

namespace sampan::runtime {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const TokenBytes> vocab,
                                     std::vector<int32_t> eos_ids, std::string what)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      eos_ids_(std::move(eos_ids)),
      what_(std::move(what)),
      matcher_(*grammar_),
      state_(matcher_.start()) {
  SAMPAN_CHECK(!eos_ids_.empty(), ErrorCode::kInvalidArgument,
               "{}: the model has no end-of-sequence token", what_);
}

bool GrammarConstraint::allowed(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_->bytes.size()) return false;
  if (std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end()) return done();
  const std::string& b = vocab_->bytes[static_cast<size_t>(id)];
  if (b.empty()) return false;
  GrammarState s = state_;
  for (const char c : b) {
    s = matcher_.step(s, static_cast<uint8_t>(c));
    if (s.empty()) return false;
  }
  return true;
}

uint32_t GrammarConstraint::intern(GrammarState s) {
  std::vector<uint32_t>& ids = state_ids_[GrammarMatcher::hash(s)];
  for (uint32_t id : ids) {
    if (states_[id] == s) return id;
  }
  states_.push_back(std::move(s));
  steps_.emplace_back();
  steps_.back().fill(kUnknown);
  ids.push_back(static_cast<uint32_t>(states_.size() - 1));
  return ids.back();
}

int32_t GrammarConstraint::next_state(uint32_t state, uint8_t byte, int64_t& budget) {
  if (const int32_t known = steps_[state][byte]; known != kUnknown) return known;
  budget -= static_cast<int64_t>(states_[state].flat.size()) + 1;
  GrammarState next = matcher_.step(states_[state], byte);
  const int32_t id = next.empty() ? -1 : static_cast<int32_t>(intern(std::move(next)));
  steps_[state][byte] = id;  // after intern: steps_ may have grown
  return id;
}

void GrammarConstraint::scan(uint32_t node, uint32_t state, std::vector<uint64_t>& ok,
                             int64_t& budget) {
  // Every child first, then their subtrees: when the budget runs out, the shorter tokens (down
  // to every single byte the grammar allows) have been decided.
  // The second pass finds each step in steps_ (a table lookup).
  const TokenBytes::TrieNode& n = vocab_->trie[node];
  size_t reached = 0;
  for (const auto& [byte, child] : n.children) {
    if (budget <= 0) break;
    ++reached;
    if (next_state(state, byte, budget) < 0) continue;  // no token through this byte
    for (int32_t id : vocab_->trie[child].ids) ok[id / 64] |= uint64_t{1} << (id % 64);
  }
  for (size_t i = 0; i < reached; ++i) {
    const auto& [byte, child] = n.children[i];
    const int32_t next = steps_[state][byte];
    if (next >= 0 && !vocab_->trie[child].children.empty()) {
      scan(child, static_cast<uint32_t>(next), ok, budget);
    }
  }
}

const std::vector<uint64_t>& GrammarConstraint::allowed_ids() {
  const uint64_t key = GrammarMatcher::hash(state_);
  auto it = memo_.find(key);
  if (it != memo_.end() && it->second.first == state_) return it->second.second;
  if (memo_.size() >= kMemoStates) memo_.clear();
  if (states_.size() > kMaxStates) {
    steps_.clear();
    states_.clear();
    state_ids_.clear();
  }
  std::vector<uint64_t> ok((vocab_->bytes.size() + 63) / 64);
  int64_t budget = kScanBudget;
  if (!vocab_->trie.empty()) scan(0, intern(state_), ok, budget);
  // The end ids exactly when the text is complete (also one that has bytes of its own).
  const bool end = done();
  for (int32_t id : eos_ids_) {
    if (id < 0 || static_cast<size_t>(id) >= vocab_->bytes.size()) continue;
    const uint64_t bit = uint64_t{1} << (id % 64);
    if (end) {
      ok[static_cast<size_t>(id) / 64] |= bit;
    } else {
      ok[static_cast<size_t>(id) / 64] &= ~bit;
    }
  }
  auto& slot = memo_[key];
  slot = {state_, std::move(ok)};
  return slot.second;
}

void GrammarConstraint::mask(std::span<float> logits) {
  mask_logits(logits, allowed_ids(), vocab_->bytes.size(), eos_ids_);
}

void GrammarConstraint::accept(int32_t id) {
  if (std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end()) return;
  SAMPAN_CHECK(id >= 0 && static_cast<size_t>(id) < vocab_->bytes.size() &&
                   !vocab_->bytes[static_cast<size_t>(id)].empty(),
               ErrorCode::kInternal, "{}: token {} has no bytes to continue the text", what_, id);
  GrammarState s = state_;
  for (const char c : vocab_->bytes[static_cast<size_t>(id)]) {
    s = matcher_.step(s, static_cast<uint8_t>(c));
    SAMPAN_CHECK(!s.empty(), ErrorCode::kInternal,
                 "{}: token {} does not continue the text the grammar allows", what_, id);
  }
  state_ = std::move(s);
}

}  // namespace sampan::runtime
