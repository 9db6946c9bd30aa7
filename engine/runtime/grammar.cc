#include "engine/runtime/grammar.h"

#include <algorithm>
#include <utility>

#include "engine/core/error.h"

namespace sampan::runtime {

uint32_t Grammar::add_rule() {
  SAMPAN_CHECK(!finalized_, ErrorCode::kInternal, "grammar: add_rule after finalize");
  SAMPAN_CHECK(rules_.size() < kMaxRules, ErrorCode::kInvalidArgument,
               "grammar: more than {} rules", kMaxRules);
  rules_.emplace_back();
  return static_cast<uint32_t>(rules_.size() - 1);
}

void Grammar::add_alt(uint32_t rule, std::vector<Symbol> seq) {
  SAMPAN_CHECK(!finalized_ && rule < rules_.size(), ErrorCode::kInternal,
               "grammar: add_alt to rule {} of {}", rule, rules_.size());
  rules_[rule].push_back(std::move(seq));
}

Grammar::Symbol Grammar::bytes(const ByteSet& set) {
  // Few distinct sets in practice (string characters, digits, single bytes): share them.
  for (size_t i = 0; i < sets_.size(); ++i) {
    if (sets_[i] == set) return kSetBit | static_cast<uint32_t>(i);
  }
  sets_.push_back(set);
  return kSetBit | static_cast<uint32_t>(sets_.size() - 1);
}

Grammar::Symbol Grammar::byte(uint8_t b) { return byte_range(b, b); }

Grammar::Symbol Grammar::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet set{};
  for (unsigned b = lo; b <= hi; ++b) set[b / 64] |= uint64_t{1} << (b % 64);
  return bytes(set);
}

namespace {

// The rules that derive some finite text (or, with `nullable`, the empty text): a worklist over
// the alternatives, each waiting on the count of its rule symbols not yet known to.
using Rules = std::vector<std::vector<std::vector<Grammar::Symbol>>>;

std::vector<bool> rules_deriving(const Rules& rules, bool nullable) {
  const size_t n = rules.size();
  std::vector<bool> yes(n, false);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(n);  // rule -> (rule, alt)
  std::vector<std::vector<uint32_t>> waiting(n);
  std::vector<uint32_t> ready;
  for (uint32_t r = 0; r < n; ++r) {
    waiting[r].assign(rules[r].size(), 0);
    for (uint32_t a = 0; a < rules[r].size(); ++a) {
      bool has_byte = false;
      for (Grammar::Symbol s : rules[r][a]) {
        if (s & Grammar::kSetBit) {
          has_byte = true;
        } else {
          users[s].emplace_back(r, a);
          ++waiting[r][a];
        }
      }
      if (nullable && has_byte) waiting[r][a] = 1u << 31;  // never reaches zero
      if (waiting[r][a] == 0 && !yes[r]) {
        yes[r] = true;
        ready.push_back(r);
      }
    }
  }
  while (!ready.empty()) {
    const uint32_t x = ready.back();
    ready.pop_back();
    for (const auto& [r, a] : users[x]) {
      if (--waiting[r][a] == 0 && !yes[r]) {
        yes[r] = true;
        ready.push_back(r);
      }
    }
  }
  return yes;
}

}  // namespace

void Grammar::finalize() {
  SAMPAN_CHECK(!finalized_ && root_ < rules_.size(), ErrorCode::kInternal,
               "grammar: finalize without a root rule");
  // Alternatives through a rule that derives no finite text are dead ends for a generator:
  // dropped, so that every prefix the recogniser takes can still be completed.
  const std::vector<bool> productive = rules_deriving(rules_, false);
  SAMPAN_CHECK(productive[root_], ErrorCode::kInvalidArgument,
               "grammar: the root derives no finite text");
  for (auto& alts : rules_) {
    std::erase_if(alts, [&](const std::vector<Symbol>& alt) {
      return std::any_of(alt.begin(), alt.end(), [&](Symbol s) {
        return !(s & kSetBit) && !productive[s];
      });
    });
  }
  // Left recursion (a rule reached again before a byte is read) would grow a stack forever.
  const std::vector<bool> nullable = rules_deriving(rules_, true);
  std::vector<std::vector<uint32_t>> left(rules_.size());  // rule -> rules it may start with
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const auto& alt : rules_[r]) {
      for (Symbol s : alt) {
        if (s & kSetBit) break;
        left[r].push_back(s);
        if (!nullable[s]) break;
      }
    }
  }
  std::vector<uint8_t> color(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
  for (uint32_t start = 0; start < rules_.size(); ++start) {
    if (color[start]) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{start, 0}};
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t next = left[r][i++];
      SAMPAN_CHECK(color[next] != 1, ErrorCode::kInvalidArgument,
                   "grammar: rule {} derives itself before reading a byte (left recursion)", next);
      if (color[next] == 0) {
        color[next] = 1;
        path.emplace_back(next, 0);
      }
    }
  }
  alt_start_.assign(rules_.size(), {});
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const auto& alt : rules_[r]) {
      alt_start_[r].push_back(static_cast<uint32_t>(code_.size()));
      for (Symbol s : alt) {
        SAMPAN_CHECK((s & kSetBit) ? (s & ~kSetBit) < sets_.size() : s < rules_.size(),
                     ErrorCode::kInternal, "grammar: rule {} names a missing symbol {:#x}", r, s);
        code_.push_back(s);
      }
      code_.push_back(kEnd);
    }
  }
  rules_.clear();
  rules_.shrink_to_fit();
  finalized_ = true;
}

GrammarMatcher::GrammarMatcher(const Grammar& g) : g_(g) {
  SAMPAN_CHECK(g.finalized(), ErrorCode::kInternal, "grammar: matcher over an unfinished grammar");
}

void GrammarMatcher::expand(std::vector<uint32_t>& stack,
                            std::vector<std::vector<uint32_t>>& out, int& budget) const {
  while (true) {
    // A cycle of rules that consumes nothing would loop here (through tail calls) or grow the
    // stack: both end when the budget or the depth cap is spent, dropping the stack.
    if (--budget < 0 || out.size() >= Grammar::kMaxStacks * 4) return;
    if (stack.empty()) {
      out.push_back(stack);
      return;
    }
    const uint32_t pos = stack.back();
    const uint32_t sym = g_.code_[pos];
    if (sym == Grammar::kEnd) {
      stack.pop_back();
      continue;
    }
    if (sym & Grammar::kSetBit) {
      out.push_back(stack);
      return;
    }
    // A rule: return past it (a tail call returns straight to the caller's caller), then read
    // each alternative.
    if (g_.code_[pos + 1] == Grammar::kEnd) {
      stack.pop_back();
    } else {
      stack.back() = pos + 1;
    }
    if (stack.size() >= Grammar::kMaxStackDepth) return;
    const std::vector<uint32_t>& alts = g_.alt_start_[sym];
    for (size_t i = 0; i < alts.size(); ++i) {
      if (i + 1 == alts.size()) {
        stack.push_back(alts[i]);
        break;  // the last alternative continues in this frame
      }
      std::vector<uint32_t> copy = stack;
      copy.push_back(alts[i]);
      expand(copy, out, budget);
    }
    if (alts.empty()) return;
  }
}

GrammarState GrammarMatcher::pack(std::vector<std::vector<uint32_t>>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > Grammar::kMaxStacks) stacks.resize(Grammar::kMaxStacks);
  GrammarState s;
  size_t n = 0;
  for (const auto& st : stacks) n += st.size() + 1;
  s.flat.reserve(n);
  for (const auto& st : stacks) {
    s.flat.push_back(static_cast<uint32_t>(st.size()));
    s.flat.insert(s.flat.end(), st.begin(), st.end());
  }
  return s;
}

GrammarState GrammarMatcher::start() const {
  std::vector<std::vector<uint32_t>> out;
  int budget = 1 << 16;
  for (uint32_t a : g_.alt_start_[g_.root_]) {
    std::vector<uint32_t> stack{a};
    expand(stack, out, budget);
  }
  return pack(out);
}

GrammarState GrammarMatcher::step(const GrammarState& s, uint8_t byte) const {
  std::vector<std::vector<uint32_t>> out;
  int budget = 1 << 16;
  for (size_t i = 0; i < s.flat.size();) {
    const uint32_t len = s.flat[i];
    const uint32_t* st = s.flat.data() + i + 1;
    i += len + 1;
    if (len == 0) continue;  // a complete text takes no more bytes
    const uint32_t sym = g_.code_[st[len - 1]];
    const Grammar::ByteSet& set = g_.sets_[sym & ~Grammar::kSetBit];
    if (!((set[byte / 64] >> (byte % 64)) & 1)) continue;
    std::vector<uint32_t> stack(st, st + len);
    stack.back() += 1;
    expand(stack, out, budget);
  }
  return pack(out);
}

bool GrammarMatcher::done(const GrammarState& s) const {
  for (size_t i = 0; i < s.flat.size(); i += s.flat[i] + 1) {
    if (s.flat[i] == 0) return true;
  }
  return false;
}

bool GrammarMatcher::matches(std::string_view text) const {
  GrammarState s = start();
  for (const char c : text) {
    if (s.empty()) return false;
    s = step(s, static_cast<uint8_t>(c));
  }
  return done(s);
}

uint64_t GrammarMatcher::hash(const GrammarState& s) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t v : s.flat) {
    h ^= v;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace sampan::runtime
