#include "engine/runtime/string_pattern.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace sampan::runtime {
namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

// A set of code points: sorted, disjoint, non-adjacent inclusive ranges.
using CharSet = std::vector<std::pair<uint32_t, uint32_t>>;

CharSet normalized(CharSet s) {
  std::sort(s.begin(), s.end());
  CharSet out;
  for (const auto& r : s) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CharSet unite(CharSet a, const CharSet& b) {
  a.insert(a.end(), b.begin(), b.end());
  return normalized(std::move(a));
}

CharSet complement(const CharSet& a) {
  CharSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : a) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
  return out;
}

CharSet minus(const CharSet& a, const CharSet& b) {
  return complement(unite(complement(a), b));
}

// What a class may generate (`lo`: in both dialects) and what it may match in either (`hi`); a
// negated class swaps them through the complement, so it stays on the safe side.
struct Class {
  CharSet lo, hi;
  bool single = false;  // one code point (may end a range)
};

Class single(uint32_t cp) { return {{{cp, cp}}, {{cp, cp}}, true}; }

// \d \w \s: ASCII in both dialects; Python's str patterns add Unicode digits, word characters and
// spaces (and \x1c-\x1f as spaces), so what either may match includes everything non-ASCII.
Class shorthand(char c) {
  const CharSet non_ascii = {{0x80, kMaxCp}};
  Class k;
  switch (c | 0x20) {
    case 'd':
      k.lo = {{'0', '9'}};
      k.hi = unite(k.lo, non_ascii);
      break;
    case 'w':
      k.lo = normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
      k.hi = unite(k.lo, non_ascii);
      break;
    default:  // 's'
      k.lo = {{'\t', '\r'}, {' ', ' '}};
      k.hi = unite({{'\t', '\r'}, {0x1C, ' '}}, non_ascii);
      break;
  }
  if (c >= 'A' && c <= 'Z') k = {complement(k.hi), complement(k.lo)};
  return k;
}

struct Node {
  enum Kind { kEmpty, kSet, kCat, kAlt, kRep, kBol, kEol } kind = kEmpty;
  CharSet set;
  std::vector<Node> kids;
  int min = 0, max = 0;  // kRep; max < 0: unbounded
};

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Node parse() {
    Node n = alt(0);
    if (i_ < p_.size()) fail("unmatched ')'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw PatternError(fmt::format("pattern at byte {}: {}", i_, what));
  }
  // A construct both dialects read but this compiler does not follow.
  [[noreturn]] void refuse(const std::string& what) const {
    throw PatternError(fmt::format("pattern at byte {}: {}", i_, what), true);
  }
  bool end() const { return i_ >= p_.size(); }
  char peek() const { return end() ? '\0' : p_[i_]; }
  bool eat(char c) {
    if (peek() != c || end()) return false;
    ++i_;
    return true;
  }

  // The next code point of the pattern (UTF-8, as JSON text decodes to).
  uint32_t next_cp() {
    const auto b = static_cast<uint8_t>(p_[i_]);
    int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (n == 0 || i_ + n > p_.size()) fail("not valid UTF-8");
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<uint8_t>(p_[i_ + k]);
      if ((c & 0xC0) != 0x80) fail("not valid UTF-8");
      cp = cp << 6 | (c & 0x3F);
    }
    i_ += n;
    return cp;
  }

  Node alt(int depth) {
    if (depth > 64) fail("groups nest deeper than 64");
    Node first = cat(depth);
    if (peek() != '|') return first;
    Node n{Node::kAlt};
    n.kids.push_back(std::move(first));
    while (eat('|')) n.kids.push_back(cat(depth));
    return n;
  }

  Node cat(int depth) {
    Node n{Node::kCat};
    while (!end() && peek() != '|' && peek() != ')') n.kids.push_back(repeat(depth));
    return n;
  }

  Node repeat(int depth) {
    Node atom_node = atom(depth);
    int lo = 0, hi = 0;
    if (!quantifier(lo, hi)) return atom_node;
    if (atom_node.kind == Node::kBol || atom_node.kind == Node::kEol) {
      fail("a quantifier on an anchor");
    }
    eat('?');  // lazy: the same texts match somewhere
    const char c = peek();
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier after a quantifier");
    Node n{Node::kRep};
    n.min = lo;
    n.max = hi;
    n.kids.push_back(std::move(atom_node));
    return n;
  }

  int number() {
    int v = 0;
    if (peek() < '0' || peek() > '9') refuse("a '{' that is not a quantifier (write \\{)");
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (p_[i_++] - '0');
      if (v > StringPatternLimits::kMaxRepeat) {
        fail(fmt::format("a repeat count above {}", StringPatternLimits::kMaxRepeat));
      }
    }
    return v;
  }

  bool quantifier(int& lo, int& hi) {
    if (eat('*')) return lo = 0, hi = -1, true;
    if (eat('+')) return lo = 1, hi = -1, true;
    if (eat('?')) return lo = 0, hi = 1, true;
    if (!eat('{')) return false;
    lo = number();
    hi = lo;
    if (eat(',')) hi = peek() == '}' ? -1 : number();
    if (!eat('}')) refuse("a '{' that is not a quantifier (write \\{)");
    if (hi >= 0 && hi < lo) fail("a quantifier {n,m} with m < n");
    return true;
  }

  Node set_node(CharSet s) {
    Node n{Node::kSet};
    n.set = std::move(s);
    return n;
  }

  Node atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (peek() == '=' || peek() == '!' ||
                   (peek() == '<' && (p_.substr(i_, 2) == "<=" || p_.substr(i_, 2) == "<!"))) {
          refuse("lookaround is not supported");
        } else if (eat('<') || (eat('P') && eat('<'))) {
          while (!end() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_')) {
            ++i_;
          }
          if (!eat('>')) fail("a group name must be letters, digits or '_' closed by '>'");
        } else {
          refuse("'(?' other than (?:, (?<name> or (?P<name> (inline flags, conditionals, "
               "atomic groups) is not supported");
        }
      }
      Node n = alt(depth + 1);
      if (!eat(')')) fail("unterminated group");
      return n;
    }
    if (c == '[') return set_node(char_class());
    if (c == '*' || c == '+' || c == '?') fail("a quantifier with nothing to repeat");
    if (c == '{') refuse("a '{' that is not a quantifier (write \\{)");
    if (eat('.')) return set_node(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    if (eat('^')) return Node{Node::kBol};
    if (eat('$')) return Node{Node::kEol};
    if (c == '\\') return set_node(escape(false).lo);
    return set_node(single(next_cp()).lo);
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  uint32_t hex_digits(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const int h = end() ? -1 : hex(p_[i_]);
      if (h < 0) fail(fmt::format("an escape that needs {} hex digits", n));
      v = v << 4 | static_cast<uint32_t>(h);
      ++i_;
    }
    return v;
  }

  Class escape(bool in_class) {
    ++i_;  // '\'
    if (end()) fail("a pattern ending in '\\'");
    const char c = p_[i_];
    const auto uc = static_cast<unsigned char>(c);
    if (std::string_view("dDwWsS").find(c) != std::string_view::npos) {
      ++i_;
      return shorthand(c);
    }
    static constexpr std::string_view kControls = "t\tn\nr\rf\fv\v";
    if (const size_t k = kControls.find(c); k != std::string_view::npos && k % 2 == 0) {
      ++i_;
      return single(static_cast<uint8_t>(kControls[k + 1]));
    }
    if (c == 'b' && in_class) return ++i_, single(8);
    if (c == '0') {
      ++i_;
      if (peek() >= '0' && peek() <= '9') refuse("an octal escape is not supported");
      return single(0);
    }
    if (c == 'x') return ++i_, single(hex_digits(2));
    if (c == 'u') {
      ++i_;
      if (peek() == '{') refuse("\\u{...} is not supported (write \\uHHHH)");
      return single(hex_digits(4));
    }
    if (c == 'b' || c == 'B') refuse("word boundaries (\\b, \\B) are not supported");
    if (c >= '1' && c <= '9') refuse("backreferences are not supported");
    if (std::isalnum(uc)) {
      refuse(fmt::format("the escape \\{} is not supported (its meaning differs between regex "
                       "dialects, or it has none)", c));
    }
    return single(next_cp());  // escaped punctuation, or any non-ASCII character: itself
  }

  CharSet char_class() {
    ++i_;  // '['
    const bool negated = eat('^');
    if (peek() == ']') refuse("']' first in a class (dialects disagree: write \\])");
    Class all;
    auto item = [&]() -> Class {
      if (end()) fail("unterminated class");
      return peek() == '\\' ? escape(true) : single(next_cp());
    };
    while (true) {
      if (end()) fail("unterminated class");
      if (eat(']')) break;
      Class a = item();
      if (peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        const Class b = item();
        if (!a.single || !b.single) refuse("a range with a shorthand class as an end");
        if (a.lo[0].first > b.lo[0].first) fail("a range out of order");
        a = {{{a.lo[0].first, b.lo[0].first}}, {{a.lo[0].first, b.lo[0].first}}, false};
      }
      all.lo = unite(std::move(all.lo), a.lo);
      all.hi = unite(std::move(all.hi), a.hi);
    }
    return negated ? complement(all.hi) : all.lo;
  }

  std::string_view p_;
  size_t i_ = 0;
};

// Thompson automaton over the parsed pattern: edges read a set, take an anchor, or nothing.
struct Nfa {
  enum EdgeKind : uint8_t { kEps, kBol, kEol, kRead };
  struct Edge {
    EdgeKind kind;
    uint32_t set;  // kRead: index into sets
    uint32_t to;
  };
  std::vector<std::vector<Edge>> out;
  std::vector<CharSet> sets;

  uint32_t state() {
    if (out.size() >= StringPatternLimits::kMaxStates) {
      throw PatternError(fmt::format("pattern expands to more than {} automaton states "
                                     "(counted repeats multiply)",
                                     StringPatternLimits::kMaxStates));
    }
    out.emplace_back();
    return static_cast<uint32_t>(out.size() - 1);
  }
  void edge(uint32_t from, EdgeKind k, uint32_t to, uint32_t set = 0) {
    out[from].push_back({k, set, to});
  }

  // Adds `n` starting at `from`; returns the state reached after it.
  uint32_t build(const Node& n, uint32_t from) {
    switch (n.kind) {
      case Node::kEmpty:
        return from;
      case Node::kSet: {
        const uint32_t to = state();
        sets.push_back(n.set);
        edge(from, kRead, to, static_cast<uint32_t>(sets.size() - 1));
        return to;
      }
      case Node::kCat:
        for (const Node& k : n.kids) from = build(k, from);
        return from;
      case Node::kAlt: {
        const uint32_t to = state();
        for (const Node& k : n.kids) {
          const uint32_t start = state();
          edge(from, kEps, start);
          edge(build(k, start), kEps, to);
        }
        return to;
      }
      case Node::kBol:
      case Node::kEol: {
        const uint32_t to = state();
        edge(from, n.kind == Node::kBol ? kBol : kEol, to);
        return to;
      }
      case Node::kRep: {
        for (int k = 0; k < n.min; ++k) from = build(n.kids[0], from);
        if (n.max < 0) {
          const uint32_t loop = state();
          edge(from, kEps, loop);
          edge(build(n.kids[0], loop), kEps, loop);
          return loop;
        }
        const uint32_t to = state();
        edge(from, kEps, to);
        for (int k = n.min; k < n.max; ++k) {
          from = build(n.kids[0], from);
          edge(from, kEps, to);
        }
        return to;
      }
    }
    return from;
  }
};

// Where a state can go on one character, after every empty edge it may take first.
struct Closure {
  std::vector<std::pair<uint32_t, uint32_t>> reads;  // (set, to)
  bool accept_any = false;                           // the pattern matched; any text may follow
  bool accept_end = false;                           // matched at '$': the text ends here
};

Closure closure(const Nfa& nfa, uint32_t from, uint32_t final_state, bool at_start,
                size_t& budget) {
  Closure c;
  std::vector<uint8_t> seen(nfa.out.size() * 2, 0);
  std::vector<std::pair<uint32_t, bool>> todo = {{from, false}};
  while (!todo.empty()) {
    const auto [s, after_eol] = todo.back();
    todo.pop_back();
    if (seen[s * 2 + after_eol]) continue;
    seen[s * 2 + after_eol] = 1;
    if (budget-- == 0) {
      throw PatternError(fmt::format("pattern is too ambiguous to compile (more than {} steps "
                                     "through empty moves)",
                                     StringPatternLimits::kMaxClosureSteps));
    }
    if (s == final_state) (after_eol ? c.accept_end : c.accept_any) = true;
    for (const Nfa::Edge& e : nfa.out[s]) {
      if (e.kind == Nfa::kEps) todo.emplace_back(e.to, after_eol);
      if (e.kind == Nfa::kBol && at_start) todo.emplace_back(e.to, after_eol);
      if (e.kind == Nfa::kEol) todo.emplace_back(e.to, true);
      if (e.kind == Nfa::kRead && !after_eol) c.reads.emplace_back(e.set, e.to);
    }
  }
  return c;
}

// The byte-range sequences encoding [lo, hi] in UTF-8, where lo and hi take n bytes each.
void utf8_ranges(uint32_t lo, uint32_t hi, int n,
                 std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  // Split until every trailing 6-bit chunk is either shared or spans its full range, so that
  // each byte position ranges independently.
  for (int k = 1; k < n; ++k) {
    const uint32_t m = (1u << (6 * k)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      utf8_ranges(lo, lo | m, n, out);
      utf8_ranges((lo | m) + 1, hi, n, out);
      return;
    }
    if ((hi & m) != m) {
      utf8_ranges(lo, (hi & ~m) - 1, n, out);
      utf8_ranges(hi & ~m, hi, n, out);
      return;
    }
  }
  auto encode = [n](uint32_t cp, int k) -> uint8_t {
    const int shift = 6 * (n - 1 - k);
    if (k > 0) return static_cast<uint8_t>(0x80 | ((cp >> shift) & 0x3F));
    static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    return static_cast<uint8_t>(kLead[n] | (cp >> shift));
  };
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int k = 0; k < n; ++k) seq.emplace_back(encode(lo, k), encode(hi, k));
  out.push_back(std::move(seq));
}

class Builder {
 public:
  Builder(Grammar& g, const std::function<uint32_t()>& new_rule, bool raw)
      : g_(g), new_rule_(new_rule), raw_(raw) {}

  // A rule reading one character of `s` as the JSON string writes it (raw: as its UTF-8 bytes).
  uint32_t char_rule(const CharSet& s) {
    if (auto it = char_rules_.find(s); it != char_rules_.end()) return it->second;
    std::vector<std::vector<Grammar::Symbol>> alts;
    Grammar::ByteSet plain{}, short_esc{}, u0{}, u1{};
    bool any_plain = false, any_short = false, any_u0 = false, any_u1 = false;
    auto set_bit = [](Grammar::ByteSet& b, uint32_t v) { b[v / 64] |= uint64_t{1} << (v % 64); };
    static constexpr std::string_view kShort = "\bb\ff\nn\rr\tt";
    for (const auto& [lo, hi] : s) {
      for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x7F); ++cp) {
        if (raw_) {
          set_bit(plain, cp);
          any_plain = true;
        } else if (cp == '"' || cp == '\\') {
          set_bit(short_esc, cp);
          any_short = true;
        } else if (cp >= 0x20) {
          set_bit(plain, cp);
          any_plain = true;
        } else if (const size_t k = kShort.find(static_cast<char>(cp));
                   k != std::string_view::npos && k % 2 == 0) {
          set_bit(short_esc, static_cast<uint8_t>(kShort[k + 1]));
          any_short = true;
        } else {
          set_bit(cp < 0x10 ? u0 : u1, static_cast<uint8_t>("0123456789abcdef"[cp % 16]));
          (cp < 0x10 ? any_u0 : any_u1) = true;
        }
      }
    }
    if (any_plain) alts.push_back({g_.bytes(plain)});
    if (any_short || any_u0 || any_u1) {
      const uint32_t esc = rule();
      if (any_short) g_.add_alt(esc, {g_.bytes(short_esc)});
      for (int h = 0; h < 2; ++h) {
        if (!(h ? any_u1 : any_u0)) continue;
        g_.add_alt(esc, {g_.byte('u'), g_.byte('0'), g_.byte('0'), g_.byte('0' + h),
                         g_.bytes(h ? u1 : u0)});
      }
      alts.push_back({g_.byte('\\'), esc});
    }
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    static constexpr uint32_t kTier[][3] = {{0x80, 0x7FF, 2}, {0x800, 0xFFFF, 3},
                                            {0x10000, kMaxCp, 4}};
    for (const auto& [lo, hi] : s) {
      for (const auto& t : kTier) {
        const uint32_t a = std::max(lo, t[0]), b = std::min(hi, t[1]);
        if (a <= b) utf8_ranges(a, b, static_cast<int>(t[2]), seqs);
      }
    }
    for (const auto& seq : seqs) {
      std::vector<Grammar::Symbol> alt;
      for (const auto& [a, b] : seq) alt.push_back(g_.byte_range(a, b));
      alts.push_back(std::move(alt));
    }
    const uint32_t r = rule();
    for (auto& a : alts) g_.add_alt(r, std::move(a));
    char_rules_.emplace(s, r);
    return r;
  }

  uint32_t rule() { return new_rule_(); }

  Grammar& g_;

 private:
  const std::function<uint32_t()>& new_rule_;
  bool raw_;
  std::map<CharSet, uint32_t> char_rules_;
};

// add_string_pattern, or with `raw` add_raw_pattern: the text is the match itself (no quotes,
// no escapes, nothing before or after it).
uint32_t add_pattern(Grammar& g, std::string_view pattern, int64_t min_len, int64_t max_len,
                     const std::function<uint32_t()>& new_rule, bool raw) {
  if (pattern.size() > StringPatternLimits::kMaxPatternBytes) {
    throw PatternError(fmt::format("pattern is longer than {} bytes",
                                   StringPatternLimits::kMaxPatternBytes));
  }
  const Node root = Parser(pattern).parse();
  Nfa nfa;
  const uint32_t start = nfa.state();
  const uint32_t final_state = nfa.build(root, start);
  const CharSet surrogates = {{0xD800, 0xDFFF}};
  const CharSet any = complement(surrogates);
  for (CharSet& s : nfa.sets) s = minus(s, surrogates);

  // Entries of the search: 0 before any character, 1 after characters skipped before the
  // match, 2 after the match (any text may follow), 3 + s after a character into NFA state s.
  // Each: where a character leads (a set per target entry) and whether the text may end.
  struct Entry {
    std::map<uint32_t, CharSet> moves;
    bool accept = false;
  };
  std::vector<Entry> entries(3);
  std::map<uint32_t, uint32_t> entry_of_state;
  std::vector<uint32_t> todo;
  auto entry_of = [&](uint32_t s) {
    auto [it, fresh] = entry_of_state.emplace(s, static_cast<uint32_t>(entries.size()));
    if (fresh) {
      entries.emplace_back();
      todo.push_back(s);
    }
    return it->second;
  };
  size_t budget = StringPatternLimits::kMaxClosureSteps, transitions = 0;
  auto take = [&](uint32_t e, const Closure& c) {
    for (const auto& [set, to] : c.reads) {
      const uint32_t t = entry_of(to);
      auto [it, fresh] = entries[e].moves.try_emplace(t);
      it->second = unite(std::move(it->second), nfa.sets[set]);
      if (fresh && ++transitions > StringPatternLimits::kMaxTransitions) {
        throw PatternError(fmt::format("pattern is too ambiguous to compile (more than {} "
                                       "transitions)", StringPatternLimits::kMaxTransitions));
      }
    }
    if (c.accept_any && !raw) entries[e].moves[2] = any;
    if (c.accept_any || c.accept_end) entries[e].accept = true;
  };
  take(0, closure(nfa, start, final_state, true, budget));
  if (!raw) {  // a search: any text before and after the match (raw: entries 1 and 2 unused)
    take(1, closure(nfa, start, final_state, false, budget));
    entries[0].moves[1] = unite(entries[0].moves[1], any);
    entries[1].moves[1] = any;
    entries[2].moves[2] = any;
    entries[2].accept = true;
  }
  while (!todo.empty()) {
    const uint32_t s = todo.back();
    todo.pop_back();
    take(entry_of_state[s], closure(nfa, s, final_state, false, budget));
  }
  // Entries from which the text can end, the only ones worth a move.
  std::vector<bool> live(entries.size());
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t e = 0; e < entries.size(); ++e) {
      if (live[e]) continue;
      bool ok = entries[e].accept;
      for (const auto& [t, set] : entries[e].moves) ok = ok || (live[t] && !set.empty());
      if (ok) live[e] = changed = true;
    }
  }
  if (!live[0]) throw PatternError("pattern matches no string");

  // Rules for (entry, characters read), the count kept up to max_len, or saturating at min_len
  // when unbounded.
  Builder b(g, new_rule, raw);
  const int64_t top = max_len >= 0 ? max_len : min_len;
  std::map<std::pair<uint32_t, int64_t>, uint32_t> rules;
  std::vector<std::pair<uint32_t, int64_t>> pending;
  auto rule_of = [&](uint32_t e, int64_t k) {
    auto [it, fresh] = rules.emplace(std::make_pair(e, k), 0);
    if (fresh) {
      it->second = b.rule();
      pending.emplace_back(e, k);
    }
    return it->second;
  };
  const Grammar::Symbol quote = g.byte('"');
  const uint32_t body = rule_of(0, 0);
  while (!pending.empty()) {
    const auto [e, k] = pending.back();
    pending.pop_back();
    const uint32_t r = rules.at({e, k});
    if (entries[e].accept && k >= min_len) {
      if (raw) {
        g.add_alt(r, {});
      } else {
        g.add_alt(r, {quote});
      }
    }
    if (max_len >= 0 && k >= max_len) continue;
    for (const auto& [t, set] : entries[e].moves) {
      if (!live[t] || set.empty()) continue;
      g.add_alt(r, {b.char_rule(set), rule_of(t, std::min(k + 1, std::max<int64_t>(top, 0)))});
    }
  }
  if (raw) return body;
  const uint32_t out = b.rule();
  g.add_alt(out, {quote, body});
  return out;
}

}  // namespace

uint32_t add_string_pattern(Grammar& g, std::string_view pattern, int64_t min_len,
                            int64_t max_len, const std::function<uint32_t()>& new_rule) {
  return add_pattern(g, pattern, min_len, max_len, new_rule, /*raw=*/false);
}

uint32_t add_raw_pattern(Grammar& g, std::string_view pattern,
                         const std::function<uint32_t()>& new_rule) {
  return add_pattern(g, pattern, 0, -1, new_rule, /*raw=*/true);
}

std::string_view format_pattern(std::string_view format) {
  // RFC 3339 full-date / partial-time, as Python's date.fromisoformat and rfc3339-validator
  // read them; February stops at 28 (leap years are not regular enough to be worth it).
#define SAMPAN_DATE                                                                      \
  "[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-"     \
  "(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define SAMPAN_TIME                                                                      \
  "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?"                         \
  "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define SAMPAN_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define SAMPAN_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
  static const std::map<std::string_view, std::string_view> kFormats = {
      {"date", "^" SAMPAN_DATE "$"},
      {"time", "^" SAMPAN_TIME "$"},
      {"date-time", "^" SAMPAN_DATE "T" SAMPAN_TIME "$"},
      {"email", "^[A-Za-z0-9._%+-]{1,64}@(?:" SAMPAN_LABEL "\\.){1,3}[A-Za-z]{2,24}$"},
      {"hostname", "^(?:" SAMPAN_LABEL "\\.){0,2}[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"},
      {"ipv4", "^(?:" SAMPAN_OCTET "\\.){3}" SAMPAN_OCTET "$"},
      {"ipv6", "^[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}$"},
      {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
  };
#undef SAMPAN_DATE
#undef SAMPAN_TIME
#undef SAMPAN_LABEL
#undef SAMPAN_OCTET
  const auto it = kFormats.find(format);
  return it == kFormats.end() ? std::string_view() : it->second;
}

}  // namespace sampan::runtime
