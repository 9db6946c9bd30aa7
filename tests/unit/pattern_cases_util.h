// Checks a compiled pattern grammar against labelled texts (tests/data/json_schema/
// patterns.json and raw_patterns.json: [text, python, ecma] per case, null where that dialect
// refuses the pattern), for test_json_schema (patterns inside JSON strings) and
// test_guided_grammar (guided_regex's raw text).
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/runtime/grammar.h"

namespace sampan::test {

struct PatternTally {
  size_t unsound = 0;   // taken, but refused by a dialect
  size_t missed = 0;    // refused, though an `exact` pattern's dialects both take it
  size_t accepted = 0;
  size_t total = 0;
};

// A text the grammar takes (as `spelled(text)`: a JSON literal, or the text itself) must match
// in every dialect that compiles the pattern; for an `exact` pattern the grammar takes exactly
// those.
inline void check_pattern_cases(const nlohmann::ordered_json& p,
                                const runtime::GrammarMatcher& m,
                                const std::function<std::string(const std::string&)>& spelled,
                                PatternTally& t) {
  const std::string pattern = p["pattern"].get<std::string>();
  const bool exact = p["exact"].get<bool>();
  for (const auto& c : p["cases"]) {
    const std::string text = c[0].get<std::string>();
    const bool py = c[1].is_null() || c[1].get<bool>();
    const bool ecma = c[2].is_null() || c[2].get<bool>();
    const bool ok = m.matches(spelled(text));
    INFO("pattern " << pattern << " text " << nlohmann::ordered_json(text).dump());
    CHECK(!(ok && !(py && ecma)));
    if (exact) CHECK(ok == (py && ecma));
    t.unsound += ok && !(py && ecma);
    t.missed += exact && !ok && py && ecma;
    t.accepted += ok;
    ++t.total;
  }
}

}  // namespace sampan::test
