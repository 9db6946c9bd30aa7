// vLLM's guided_choice and guided_regex grammars (engine/runtime/guided_grammar.h): choices
// exactly, and raw full matches against Python's re.fullmatch and ECMAScript's RegExp
// (tests/data/json_schema/raw_patterns.json, tests/reference/make_raw_pattern_cases.py).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/runtime/grammar.h"
#include "engine/runtime/guided_grammar.h"
#include "tests/unit/pattern_cases_util.h"

using namespace sampan;
using namespace sampan::runtime;
using OJson = nlohmann::ordered_json;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.field() == "guided");
    return e.what();
  }
  return "";
}

// Every text the grammar derives, up to `max_len` bytes, by walking the recogniser over
// `alphabet`.
std::vector<std::string> walk(const GrammarMatcher& m, const std::string& alphabet,
                              size_t max_len) {
  std::vector<std::string> out;
  std::vector<std::pair<std::string, GrammarState>> todo = {{"", m.start()}};
  while (!todo.empty()) {
    auto [text, s] = std::move(todo.back());
    todo.pop_back();
    if (m.done(s)) out.push_back(text);
    if (text.size() == max_len) continue;
    for (const char c : alphabet) {
      GrammarState t = m.step(s, static_cast<uint8_t>(c));
      if (!t.empty()) todo.push_back({text + c, std::move(t)});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("guided_choice: exactly the choices, prefixes shared", "[guided]") {
  std::vector<std::string> choices = {"yes", "no", "maybe", "y", "", "n\"o\\", "\xe4\xb8\xad"};
  const auto g = compile_choice_grammar(choices, "guided");
  const GrammarMatcher m(*g);
  for (const std::string& c : choices) CHECK(m.matches(c));
  for (const char* bad : {"ye", "yess", "nope", "m", "maybe ", " yes", "\xe4\xb8"}) {
    INFO(bad);
    CHECK_FALSE(m.matches(bad));
  }
  // Walking every byte string over the choices' bytes finds the choices and nothing else.
  std::vector<std::string> want = choices;
  std::sort(want.begin(), want.end());
  CHECK(walk(m, "yesnomab\"\\", 6) == std::vector<std::string>({"", "maybe", "n\"o\\", "no",
                                                                  "y", "yes"}));

  // 4096 choices with a common prefix (more than the recogniser's 256 alternatives at once,
  // which a flat list of alternatives would exceed): all of them, each alone.
  std::vector<std::string> many;
  for (int i = 0; i < 4096; ++i) many.push_back("item-" + std::to_string(i));
  const auto gm = compile_choice_grammar(many, "guided");
  const GrammarMatcher mm(*gm);
  size_t ok = 0;
  for (const std::string& c : many) ok += mm.matches(c) ? 1 : 0;
  CHECK(ok == many.size());
  CHECK_FALSE(mm.matches("item-4096"));
  CHECK_FALSE(mm.matches("item-"));
  CHECK_FALSE(mm.matches("item-00"));
}

TEST_CASE("guided_choice: refusals name the field", "[guided]") {
  CHECK_THAT(error_of([] { compile_choice_grammar({}, "guided"); }), Catch::Contains("empty"));
  std::vector<std::string> too_many(GuidedLimits::kMaxChoices + 1, "a");
  CHECK_THAT(error_of([&] { compile_choice_grammar(too_many, "guided"); }),
             Catch::Contains("4097 choices, more than 4096"));
  std::vector<std::string> too_long = {std::string(GuidedLimits::kMaxChoiceBytes + 1, 'x')};
  CHECK_THAT(error_of([&] { compile_choice_grammar(too_long, "guided"); }),
             Catch::Contains("bytes, more than"));
}

// Raw texts against re.fullmatch and the anchored RegExp (pattern_cases_util.h's check).
TEST_CASE("guided_regex: full matches against Python's re and ECMAScript's RegExp", "[guided]") {
  std::ifstream f(std::string(SAMPAN_SOURCE_DIR) + "/tests/data/json_schema/raw_patterns.json");
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  const OJson all = OJson::parse(ss.str());
  REQUIRE(all["patterns"].size() >= 40);
  sampan::test::PatternTally tally;
  size_t refusals = 0;
  for (const auto& p : all["patterns"]) {
    const std::string pattern = p["pattern"].get<std::string>();
    const bool matchable = std::any_of(p["cases"].begin(), p["cases"].end(), [](const OJson& c) {
      return !(c[1] == OJson(false)) && !(c[2] == OJson(false));
    });
    // Refused only as matching nothing ("a^b"), and then no text may match in both dialects.
    std::shared_ptr<const Grammar> g;
    std::string refused;
    try {
      g = compile_regex_grammar(pattern, "guided");
    } catch (const Error& e) {
      refused = e.what();
    }
    if (!g) {
      INFO("pattern " << pattern);
      CHECK_FALSE(matchable);
      CHECK_THAT(refused, Catch::Contains("matches no string") || Catch::Contains("admits no text"));
      ++refusals;
      continue;
    }
    const GrammarMatcher m(*g);
    sampan::test::check_pattern_cases(p, m, [](const std::string& t) { return t; }, tally);
  }
  CHECK(tally.unsound == 0);
  CHECK(tally.missed == 0);
  CHECK(tally.accepted > 500);
  CHECK(tally.total > 8000);
  CHECK(refusals == 2);  // "a^b" and "^a$b"
}

TEST_CASE("guided_regex: raw bytes, refusals with the offset", "[guided]") {
  // Quotes, backslashes and control characters are themselves, not JSON escapes.
  const auto g = compile_regex_grammar("a\"\\\\\\n[\\t]", "guided");
  const GrammarMatcher m(*g);
  CHECK(m.matches("a\"\\\n\t"));
  CHECK_FALSE(m.matches("\"a\\\"\\\\\\n\\t\""));
  CHECK_THAT(error_of([] { compile_regex_grammar("(a", "guided"); }), Catch::Contains("'guided'"));
  CHECK_THAT(error_of([] { compile_regex_grammar("a(?=b)", "guided"); }),
             Catch::Contains("lookahead") || Catch::Contains("lookaround") ||
                 Catch::Contains("not supported"));
  CHECK_THAT(error_of([] { compile_regex_grammar(std::string(5000, 'a'), "guided"); }),
             Catch::Contains("longer than 4096 bytes"));
}
