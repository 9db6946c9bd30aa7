#include "engine/runtime/json_constraint.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "engine/core/error.h"

namespace sampan::runtime {

std::shared_ptr<const TokenBytes> TokenBytes::build(const tok::Tokenizer& tokenizer) {
  auto t = std::make_shared<TokenBytes>();
  const int64_t vocab = tokenizer.vocab_size();
  t->bytes.resize(static_cast<size_t>(vocab));
  // A plain word token before each id, so that SentencePiece's rule of dropping the leading space
  // of the text's first piece does not apply, and the id's own bytes are what decode adds.
  int32_t prefix = -1;
  for (const char* word : {"a", "\xe2\x96\x81" "a", "\xc4\xa0" "a", "x", "0"}) {
    if (auto id = tokenizer.token_id(word); id && !tokenizer.is_special(*id)) {
      prefix = *id;
      break;
    }
  }
  std::string base;
  if (prefix >= 0) {
    const std::array<int32_t, 1> one{prefix};
    base = tokenizer.decode(one, /*skip_special=*/false);
  }
  for (int32_t id = 0; id < vocab; ++id) {
    if (tokenizer.is_special(id)) continue;
    if (prefix < 0) {
      const std::array<int32_t, 1> one{id};
      t->bytes[static_cast<size_t>(id)] = tokenizer.decode(one, false);
      continue;
    }
    const std::array<int32_t, 2> two{prefix, id};
    std::string s = tokenizer.decode(two, false);
    if (s.size() >= base.size() && s.compare(0, base.size(), base) == 0) {
      t->bytes[static_cast<size_t>(id)] = s.substr(base.size());
    }
  }
  t->build_trie();
  return t;
}

void TokenBytes::build_trie() {
  trie.assign(1, {});
  for (size_t id = 0; id < bytes.size(); ++id) {
    uint32_t node = 0;
    const std::string& b = bytes[id];
    if (b.empty()) continue;
    for (const char c : b) {
      const auto byte = static_cast<uint8_t>(c);
      auto& kids = trie[node].children;
      auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) {
        return k.first == byte;
      });
      if (it != kids.end()) {
        node = it->second;
        continue;
      }
      const auto child = static_cast<uint32_t>(trie.size());
      kids.emplace_back(byte, child);  // before trie grows, while `kids` is valid
      trie.emplace_back();
      node = child;
    }
    trie[node].ids.push_back(static_cast<int32_t>(id));
  }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenBytes> vocab,
                               std::vector<int32_t> eos_ids)
    : vocab_(std::move(vocab)), eos_ids_(std::move(eos_ids)) {
  SAMPAN_CHECK(!eos_ids_.empty(), ErrorCode::kInvalidArgument,
               "response_format json_object: the model has no end-of-sequence token");
}

bool JsonConstraint::allowed(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= vocab_->bytes.size()) return false;
  if (std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end()) return done();
  const std::string& b = vocab_->bytes[static_cast<size_t>(id)];
  if (b.empty()) return false;
  JsonState s = state_;
  for (const char c : b) {
    if (!json_step(s, static_cast<uint8_t>(c))) return false;
  }
  return true;
}

const std::vector<uint64_t>& JsonConstraint::allowed_ids() {
  const uint64_t key = json_state_hash(state_);
  auto it = memo_.find(key);
  if (it != memo_.end() && it->second.first == state_) return it->second.second;
  if (memo_.size() >= kMemoStates) memo_.clear();
  const size_t n = vocab_->bytes.size();
  std::vector<uint64_t> ok((n + 63) / 64);
  for (size_t id = 0; id < n; ++id) {
    if (allowed(static_cast<int32_t>(id))) ok[id / 64] |= uint64_t{1} << (id % 64);
  }
  auto& slot = memo_[key];
  slot = {state_, std::move(ok)};
  return slot.second;
}

void mask_logits(std::span<float> logits, const std::vector<uint64_t>& ok, size_t vocab,
                 const std::vector<int32_t>& eos_ids) {
  const size_t n = std::min(vocab, logits.size());
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (!((ok[i / 64] >> (i % 64)) & 1)) {
      logits[i] = -std::numeric_limits<float>::infinity();
    } else if (logits[i] != -std::numeric_limits<float>::infinity()) {
      any = true;
    }
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = -std::numeric_limits<float>::infinity();
  // Every allowed id at -inf (a model that rules out all of them, or a vocabulary that cannot
  // spell what comes next): end the text rather than leave nothing to sample; it is then a
  // prefix.
  if (!any) {
    for (int32_t id : eos_ids) {
      if (static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = 0.0f;
    }
  }
}

void JsonConstraint::mask(std::span<float> logits) {
  mask_logits(logits, allowed_ids(), vocab_->bytes.size(), eos_ids_);
}

void JsonConstraint::accept(int32_t id) {
  if (std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end()) return;
  JsonState s = state_;
  bool ok = id >= 0 && static_cast<size_t>(id) < vocab_->bytes.size() &&
            !vocab_->bytes[static_cast<size_t>(id)].empty();
  if (ok) {
    for (const char c : vocab_->bytes[static_cast<size_t>(id)]) {
      if (!(ok = json_step(s, static_cast<uint8_t>(c)))) break;
    }
  }
  SAMPAN_CHECK(ok, ErrorCode::kInternal,
               "response_format json_object: token {} does not continue the JSON text", id);
  state_ = s;
}

}  // namespace sampan::runtime
