// JSON Schema `pattern` (engine/runtime/string_pattern.h), fed arbitrary bytes: in serving a
// pattern comes from any client's response_format or tool parameters. Input: one byte of
// length bounds, then the pattern. Besides crashes, hangs and runaway memory (the state cap,
// repeat counts, the rule cap), a differential check: a string walked out of the compiled
// grammar must be one JSON string literal, within the length bounds, and — for an ASCII
// pattern and text that std::regex's ECMAScript grammar reads — one the pattern finds.
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 512) return 0;
  // Bounds byte: low nibble min length, high nibble max length - min (15: unbounded).
  const int64_t min_len = data[0] & 15;
  const int64_t max_len = (data[0] >> 4) == 15 ? -1 : min_len + (data[0] >> 4);
  const std::string pattern(sampan::fuzz::as_text(data + 1, size - 1));
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
  // The oracle: libstdc++'s ECMAScript regex, byte-wise, so ASCII only; short texts keep its
  // backtracking bounded. Patterns it does not read (named groups, ...) are skipped.
  if (!ascii(pattern) || !ascii(text) || pattern.size() > 64 || text.size() > 48) return 0;
  // It truncates \uHHHH and \xHH past 0x7F to a char: no oracle for those.
  if (pattern.find("\\u") != std::string::npos || pattern.find("\\x") != std::string::npos) {
    return 0;
  }
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error&) {
    return 0;
  }
  try {
    if (!std::regex_search(text, re)) std::abort();
  } catch (const std::regex_error&) {  // its complexity / stack limits
  }
  return 0;
}
