// JSON Schema `pattern` and vLLM's guided_regex (engine/runtime/string_pattern.h), fed arbitrary
// bytes: in serving a pattern comes from any client's response_format, tool parameters or
// guided_regex. Input: one byte of length bounds, then the pattern. Besides crashes, hangs and
// runaway memory (the state cap, repeat counts, the rule cap), a differential check: a string
// walked out of the compiled grammar must be one JSON string literal, within the length bounds,
// and — for an ASCII pattern and text that std::regex's ECMAScript grammar reads — one the
// pattern finds; a raw text walked out of the same pattern compiled as guided_regex
// (add_raw_pattern) one the whole pattern matches.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <regex>
#include <string>

#include "engine/core/error.h"
#include "engine/runtime/string_pattern.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/grammar_walk.h"

using namespace sampan::runtime;

namespace {

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

bool ascii(const std::string& s) {
  for (const char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

// libstdc++'s ECMAScript regex as the oracle, byte-wise, so ASCII only; short texts keep its
// backtracking bounded. Patterns it does not read (named groups, ...) are skipped, and so are
// \uHHHH and \xHH (it truncates those past 0x7F to a char). `whole`: regex_match, else
// regex_search.
void check_oracle(const std::string& pattern, const std::string& text, bool whole) {
  if (!ascii(pattern) || !ascii(text) || pattern.size() > 64 || text.size() > 48) return;
  if (pattern.find("\\u") != std::string::npos || pattern.find("\\x") != std::string::npos) {
    return;
  }
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error&) {
    return;
  }
  try {
    if (!(whole ? std::regex_match(text, re) : std::regex_search(text, re))) std::abort();
  } catch (const std::regex_error&) {  // its complexity / stack limits
  }
}

// guided_regex: the raw texts of the whole pattern.
void check_raw(const uint8_t* data, size_t size, const std::string& pattern) {
  Grammar g;
  try {
    g.set_root(add_raw_pattern(g, pattern, [&g] { return g.add_rule(); }));
    g.finalize();
  } catch (const PatternError&) {
    return;
  } catch (const sampan::Error& e) {
    if (e.code() != sampan::ErrorCode::kInvalidArgument) std::abort();
    return;
  }
  const GrammarMatcher m(g);
  if (m.start().empty()) return;
  const sampan::fuzz::GrammarWalk w = sampan::fuzz::walk_grammar(m, data, size, 160, 1);
  if (w.stuck && !m.done(w.state)) std::abort();
  if (m.done(w.state)) check_oracle(pattern, w.text, /*whole=*/true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 512) return 0;
  // Bounds byte: low nibble min length, high nibble max length - min (15: unbounded).
  const int64_t min_len = data[0] & 15;
  const int64_t max_len = (data[0] >> 4) == 15 ? -1 : min_len + (data[0] >> 4);
  const std::string pattern(sampan::fuzz::as_text(data + 1, size - 1));
  check_raw(data, size, pattern);
  Grammar g;
  uint32_t rule = 0;
  try {
    rule = add_string_pattern(g, pattern, min_len, max_len, [&g] { return g.add_rule(); });
    g.set_root(rule);
    g.finalize();
  } catch (const PatternError&) {
    return 0;
  } catch (const sampan::Error& e) {
    // The rule cap, or a pattern with no string within the lengths (finalize finds no text).
    if (e.code() != sampan::ErrorCode::kInvalidArgument) std::abort();
    return 0;
  }
  const GrammarMatcher m(g);
  if (m.start().empty()) return 0;
  // Stop at a complete text a quarter of the time, or after 160 bytes.
  const sampan::fuzz::GrammarWalk w = sampan::fuzz::walk_grammar(m, data, size, 160, 1);
  const GrammarState& s = w.state;
  const std::string& out = w.text;
  if (w.stuck && !m.done(s)) std::abort();  // a prefix taken that nothing completes
  if (!m.done(s)) return 0;
  std::string text;
  try {
    text = nlohmann::json::parse(out).get<std::string>();  // a JSON string literal, whole
  } catch (const nlohmann::json::exception&) {
    std::abort();
  }
  const auto n = static_cast<int64_t>(code_points(text));
  if (n < min_len || (max_len >= 0 && n > max_len)) std::abort();
  check_oracle(pattern, text, /*whole=*/false);
  return 0;
}
