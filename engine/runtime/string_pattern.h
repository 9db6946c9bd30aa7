// JSON Schema `pattern` and `format` for strings, compiled into a byte grammar (grammar.h): the
// rule derives a JSON string literal (quotes included) whose decoded text the regular expression
// finds, as `re.search(pattern, text)` (Python's jsonschema) and ECMA-262's `RegExp.test` both
// would, with a code-point length in [min_len, max_len].
//
// What a caller may rely on: every text the rule derives satisfies both dialects. Where they
// differ the generated set is the intersection: \d is [0-9], \w is [A-Za-z0-9_], \s is ASCII
// whitespace, `.` excludes \n, \r, U+2028 and U+2029, `$` is the end of the text (not before a
// final newline). Negated shorthands (\D, \W, \S) and negated classes containing a shorthand
// generate ASCII only where the dialects' Unicode tables would disagree. Characters are written
// in one form: themselves, except '"' and '\' (escaped) and controls (\b \f \n \r \t, else
// \u00xx); surrogates are never generated.
//
// Syntax accepted: literals, `.`, classes `[...]` / `[^...]` with ranges and shorthands,
// \d \D \w \W \s \S, \t \n \r \f \v \0, \xHH, \uHHHH, escaped punctuation, groups `(...)`,
// `(?:...)`, `(?<name>...)`, `(?P<name>...)`, `|`, quantifiers * + ? {n} {n,} {n,m} (lazy forms
// too: the same set of texts), anchors ^ and $ anywhere. Refused with the byte offset named
// (PatternError): backreferences, lookaround, \b \B, inline flags, \p{...}, letter escapes the
// dialects read differently, `{,n}`, a `{` that is no quantifier, `]` first in a class.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/runtime/grammar.h"

namespace sampan::runtime {

struct PatternError : std::runtime_error {
  explicit PatternError(const std::string& what, bool unsupported_feature = false)
      : std::runtime_error(what), unsupported(unsupported_feature) {}
  // A valid regular expression using a feature this compiler does not follow (lookaround,
  // backreferences, ...), rather than a malformed one or one past a limit.
  bool unsupported;
};

struct StringPatternLimits {
  static constexpr size_t kMaxPatternBytes = 4096;
  static constexpr size_t kMaxStates = 4096;  // automaton states after counted repeats expand
  static constexpr int kMaxRepeat = 1000;     // n and m of {n,m}
  // Ambiguity: states reached through empty moves, summed over the states closed, and the
  // transitions left after closing ((?:a?){1000} has half a million).
  static constexpr size_t kMaxClosureSteps = size_t{1} << 22;
  static constexpr size_t kMaxTransitions = size_t{1} << 16;
};

// Adds rules to `g` (each made by `new_rule`, so the caller can bound them) and returns the one
// deriving the string literals described above (max_len < 0: unbounded). Throws PatternError
// naming what and where for a pattern it cannot follow or that is too large.
uint32_t add_string_pattern(Grammar& g, std::string_view pattern, int64_t min_len,
                            int64_t max_len, const std::function<uint32_t()>& new_rule);

// The same regular expressions as raw text (vLLM's guided_regex): the rule derives exactly the
// texts the whole pattern matches (as Python's re.fullmatch and an ECMA-262 RegExp anchored at
// both ends would, in the intersection above), each character as its UTF-8 bytes, nothing quoted
// or escaped. Same errors and limits.
uint32_t add_raw_pattern(Grammar& g, std::string_view pattern,
                         const std::function<uint32_t()>& new_rule);

// The pattern `add_string_pattern` enforces for a JSON Schema `format` (date, time, date-time,
// email, hostname, ipv4, ipv6, uuid), anchored at both ends; empty for a format it does not
// enforce (a validator treats `format` as an annotation unless asked to check it). Each admits
// a subset of what Python's jsonschema FormatChecker accepts: dates without February 29, times
// without leap seconds, ipv6 in its full eight-group form, hostnames of up to three labels.
std::string_view format_pattern(std::string_view format);

}  // namespace sampan::runtime
