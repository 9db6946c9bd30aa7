// A byte-level context-free grammar and its recogniser, for constrained decoding where JSON mode's
// fixed recogniser (json_grammar.h) is not enough: a JSON schema (json_schema.h) compiles to one
// of these. The recogniser is a nondeterministic pushdown automaton: its state is a set of
// stacks of grammar positions, advanced one byte at a time, so alternatives that share a prefix
// (anyOf branches, optional properties, enum values) are followed side by side until a byte
// tells them apart.
//
// What a grammar may not contain: left recursion, or a cycle of rules that consumes no byte
// (each would grow a stack without bound). Both are caught, not looped on: a stack past
// kMaxStackDepth is dropped, so such a grammar accepts less (the compilers here emit neither).
// Sound by construction: step() and done() never accept what the grammar does not derive; the
// caps (kMaxStacks, kMaxStackDepth) only ever make it accept less.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sampan::runtime {

class Grammar {
 public:
  // A symbol in a rule's alternative: a set of bytes (one byte consumed), or a rule.
  using Symbol = uint32_t;
  using ByteSet = std::array<uint64_t, 4>;  // bit b: byte b

  static constexpr size_t kMaxStacks = 256;      // alternatives followed at once
  static constexpr size_t kMaxStackDepth = 192;  // nesting of rules still open
  static constexpr size_t kMaxRules = 1 << 16;

  // A new rule without alternatives; its id.
  uint32_t add_rule();
  // Adds `seq` (empty: the rule may derive the empty string) as an alternative of `rule`.
  void add_alt(uint32_t rule, std::vector<Symbol> seq);
  Symbol bytes(const ByteSet& set);
  Symbol byte(uint8_t b);
  Symbol byte_range(uint8_t lo, uint8_t hi);
  static Symbol rule_symbol(uint32_t rule) { return rule; }
  // The rule a text must derive (the first one added unless set).
  void set_root(uint32_t rule) { root_ = rule; }
  size_t rule_count() const { return rules_.size(); }

  // Lays the alternatives out for the recogniser; add_* may not be called afterwards.
  void finalize();
  bool finalized() const { return finalized_; }

  // Positions: an index into code_, whose entries are a byte set (kSetBit | set id), a rule
  // id, or kEnd (an alternative's end).
  static constexpr uint32_t kSetBit = 0x80000000u;
  static constexpr uint32_t kEnd = 0xFFFFFFFFu;

 private:
  friend struct GrammarState;
  friend class GrammarMatcher;
  std::vector<std::vector<std::vector<Symbol>>> rules_;  // [rule][alt][symbol]
  std::vector<ByteSet> sets_;
  uint32_t root_ = 0;
  bool finalized_ = false;
  std::vector<uint32_t> code_;                    // alternatives, each ended by kEnd
  std::vector<std::vector<uint32_t>> alt_start_;  // [rule] -> positions in code_
};

// The recogniser's state after a prefix: stacks of return positions, each topped by a byte
// set position (or empty: the prefix is a complete text). Sorted, without duplicates, in one flat
// vector ([length, positions...] per stack), so that states compare and hash as plain data.
struct GrammarState {
  std::vector<uint32_t> flat;
  bool empty() const { return flat.empty(); }
  bool operator==(const GrammarState&) const = default;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(const Grammar& g);  // g finalized, outliving the matcher

  // The state before any byte (empty when the root derives nothing within the caps).
  GrammarState start() const;
  // The state after `byte`; empty when no text of the grammar has the new prefix.
  GrammarState step(const GrammarState& s, uint8_t byte) const;
  // Whether the prefix is a complete text.
  bool done(const GrammarState& s) const;
  // Whether `text` is a complete text of the grammar (tests, diagnostics).
  bool matches(std::string_view text) const;
  static uint64_t hash(const GrammarState& s);

 private:
  // Pushes onto `out` every stack that `stack` (top: a position about to be read) expands to
  // with a byte set or nothing on top; `budget` bounds the work of one step.
  void expand(std::vector<uint32_t>& stack, std::vector<std::vector<uint32_t>>& out,
              int& budget) const;
  static GrammarState pack(std::vector<std::vector<uint32_t>>& stacks);

  const Grammar& g_;
};

}  // namespace sampan::runtime
