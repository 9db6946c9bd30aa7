// JSON-schema constrained decoding: the schema compiler and the grammar recogniser
// (json_schema.h, grammar.h) against Python's jsonschema as the reference (cases labelled by
// tests/reference/make_json_schema_cases.py: the grammar must accept no text jsonschema refuses,
// and every document built in the promised form), the schema errors, grammars that would loop,
// and GrammarConstraint driving a Sampler over a synthetic vocabulary.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/grammar.h"
#include "engine/runtime/grammar_constraint.h"
#include "engine/runtime/json_schema.h"
#include "engine/runtime/number_range.h"
#include "engine/runtime/sampler.h"
#include "tests/unit/pattern_cases_util.h"

using namespace sampan;
using namespace sampan::runtime;
using OJson = nlohmann::ordered_json;

namespace {

// A labelled file of tests/data/json_schema (made by tests/reference/make_*_cases.py).
OJson load_cases(const std::string& name = "cases.json") {
  std::ifstream f(std::string(SAMPAN_SOURCE_DIR) + "/tests/data/json_schema/" + name);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  return OJson::parse(ss.str());
}

std::string error_of(const std::string& schema) {
  try {
    compile_json_schema(schema, "response_format.json_schema.schema");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.field() == "response_format.json_schema.schema");
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("json schema: the grammar accepts no text jsonschema refuses, and every canonical one",
          "[json_schema]") {
  const OJson all = load_cases();
  REQUIRE(all.size() >= 9);
  size_t accepted_invalid = 0, canonical_refused = 0, accepted = 0, total = 0;
  for (const auto& s : all) {
    const std::string name = s["name"].get<std::string>();
    const auto grammar = compile_json_schema(s["schema"].dump(), "schema");
    const GrammarMatcher m(*grammar);
    for (const auto& c : s["cases"]) {
      const std::string text = c[0].get<std::string>();
      const bool valid = c[1].get<bool>(), canonical = c[2].get<bool>();
      const bool ok = m.matches(text);
      INFO(name << ": " << text);
      if (ok && !valid) ++accepted_invalid;
      if (canonical && !ok) ++canonical_refused;
      CHECK(!(ok && !valid));
      if (canonical) CHECK(ok);
      accepted += ok;
      ++total;
    }
  }
  CHECK(accepted_invalid == 0);
  CHECK(canonical_refused == 0);
  // The mutations are not all refused: the check above is not vacuous.
  CHECK(accepted > 1000);
  CHECK(total > 5000);
}

// patterns.json (tests/reference/make_string_pattern_cases.py): texts labelled by Python's
// re.search and by ECMAScript's RegExp (node). A text the grammar takes must match in every
// dialect that compiles the pattern; for an `exact` pattern (an alphabet where the dialects and
// string_pattern.h's intersection agree) the grammar takes exactly those.
TEST_CASE("json schema: pattern against Python's re and ECMAScript's RegExp", "[json_schema]") {
  const OJson all = load_cases("patterns.json");
  REQUIRE(all["patterns"].size() >= 40);
  sampan::test::PatternTally tally;
  for (const auto& p : all["patterns"]) {
    const std::string pattern = p["pattern"].get<std::string>();
    const std::string schema = OJson{{"type", "string"}, {"pattern", pattern}}.dump();
    const bool matchable = std::any_of(p["cases"].begin(), p["cases"].end(), [](const OJson& c) {
      return !(c[1] == OJson(false)) && !(c[2] == OJson(false));
    });
    if (!matchable) {  // "a^b": refused as matching nothing, not compiled to an empty grammar
      INFO("pattern " << pattern);
      CHECK_THAT(error_of(schema), Catch::Contains("matches no string"));
      continue;
    }
    const auto grammar = compile_json_schema(schema, "schema");
    const GrammarMatcher m(*grammar);
    sampan::test::check_pattern_cases(p, m, [](const std::string& t) { return OJson(t).dump(); }, tally);
  }
  CHECK(tally.unsound == 0);
  CHECK(tally.missed == 0);
  CHECK(tally.accepted > 1000);
  CHECK(tally.total > 8000);
  // Formats against jsonschema's FormatChecker: nothing it refuses, every text built in the
  // promised subset.
  REQUIRE(all["formats"].size() == 8);
  size_t format_accepted = 0;
  for (const auto& fm : all["formats"]) {
    const std::string format = fm["format"].get<std::string>();
    const auto grammar =
        compile_json_schema(OJson{{"type", "string"}, {"format", format}}.dump(), "schema");
    const GrammarMatcher m(*grammar);
    for (const auto& c : fm["cases"]) {
      const std::string text = c[0].get<std::string>();
      const bool ok = m.matches(OJson(text).dump());
      INFO("format " << format << " text " << text);
      CHECK(!(ok && !c[1].get<bool>()));
      if (c[2].get<bool>()) CHECK(ok);
      format_accepted += ok;
    }
  }
  CHECK(format_accepted > 400);
}

TEST_CASE("json schema: hand cases", "[json_schema]") {
  auto matches = [](const std::string& schema, const std::string& text) {
    return GrammarMatcher(*compile_json_schema(schema, "s")).matches(text);
  };
  const std::string person =
      R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},)"
      R"("required":["b"]})";
  CHECK(matches(person, R"({"b":1,"a":"x"})"));
  CHECK(matches(person, R"({"b":-0})"));
  CHECK(matches(person, "{\n  \"b\": 12,\n  \"a\": \"\"\n}"));
  CHECK_FALSE(matches(person, R"({"a":"x","b":1})"));  // properties in the schema's order
  CHECK_FALSE(matches(person, R"({"a":"x"})"));        // b is required
  CHECK_FALSE(matches(person, R"({"b":1.5})"));
  CHECK_FALSE(matches(person, R"({"b":01})"));
  CHECK_FALSE(matches(person, R"({"b":1,})"));
  CHECK_FALSE(matches(person, R"( {"b":1})"));  // nothing before or after the value
  CHECK_FALSE(matches(person, R"({"b":1} )"));
  CHECK_FALSE(matches(person, R"({"b":1,"c":2})"));  // members the schema does not name
  // Strings: UTF-8 per RFC 3629, no raw controls, escapes outside the surrogates.
  const std::string str = R"({"type":"string","maxLength":3})";
  CHECK(matches(str, "\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\""));  // 3 code points
  CHECK_FALSE(matches(str, "\"abcd\""));
  CHECK(matches(str, R"("\n\u00e9\"")"));
  CHECK_FALSE(matches(str, R"("\ud83d")"));
  CHECK_FALSE(matches(str, "\"\x01\""));
  CHECK_FALSE(matches(str, "\"\xc0\xaf\""));  // overlong
  CHECK_FALSE(matches(str, "\"\xed\xa0\x80\""));  // a surrogate in UTF-8
  // Numbers: JSON's grammar within the digit limits.
  const std::string num = R"({"type":"number"})";
  for (const char* t : {"0", "-1.25", "1e5", "2.5E-07", "1234567890123456", "0.1234567890123456"}) {
    CHECK(matches(num, t));
  }
  for (const char* t : {"01", "1.", ".5", "+1", "1e", "--1", "12345678901234567", "NaN", "1e123"}) {
    CHECK_FALSE(matches(num, t));
  }
  CHECK(matches(R"({"enum":["a",1,null,{"k":[true]}]})", R"({"k":[true]})"));
  CHECK_FALSE(matches(R"({"enum":["a",1]})", "2"));
  CHECK(matches(R"({"type":"string","enum":["a",1]})", R"("a")"));
  CHECK_FALSE(matches(R"({"type":"string","enum":["a",1]})", "1"));  // the type filters enum
  CHECK(matches(R"({"type":"array","maxItems":0})", "[]"));
  CHECK_FALSE(matches(R"({"type":"array","maxItems":0})", "[1]"));
  CHECK(matches(R"({"type":"array","minItems":2,"items":{"type":"null"}})", "[null, null]"));
  CHECK_FALSE(matches(R"({"type":"array","minItems":2,"items":{"type":"null"}})", "[null]"));
  CHECK(matches(R"({"type":"object","additionalProperties":false})", "{}"));
  CHECK_FALSE(matches(R"({"type":"object","additionalProperties":false})", R"({"a":1})"));
  CHECK(matches("true", R"({"x":[1,{"y":null}]})"));
  // prefixItems: the first items' schemas (an array may stop before their end), items the
  // rest's, false for none.
  CHECK(matches(R"({"type":"array","items":false})", "[]"));
  CHECK_FALSE(matches(R"({"type":"array","items":false})", "[1]"));
  const std::string tuple = R"({"prefixItems":[{"const":1},{"const":2},{"const":3}],"maxItems":2})";
  CHECK(matches(tuple, "[]"));
  CHECK(matches(tuple, "[1]"));
  CHECK(matches(tuple, "[1, 2]"));
  CHECK_FALSE(matches(tuple, "[2]"));
  CHECK_FALSE(matches(tuple, "[1,2,3]"));
  const std::string rest = R"({"prefixItems":[{"type":"string"}],"items":{"type":"null"},)"
                           R"("minItems":3})";
  CHECK(matches(rest, R"(["a",null,null])"));
  CHECK(matches(rest, R"(["a",null,null,null])"));
  CHECK_FALSE(matches(rest, R"(["a",null])"));
  CHECK_FALSE(matches(rest, R"([null,null,null])"));
  CHECK_THAT(error_of(R"({"prefixItems":[{}],"items":false,"minItems":2})"),
             Catch::Contains("more than the items allowed"));
  // An anyOf / oneOf branch using what the compiler does not follow is left out (the others
  // still generate valid values); a malformed branch is still an error, as is a union with no
  // branch left. Pydantic's Decimal: a number, or a string whose pattern has a lookahead.
  const std::string decimal = R"({"anyOf":[{"type":"number"},{"type":"string",)"
                              R"("pattern":"^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"}]})";
  CHECK(matches(decimal, "2.5"));
  CHECK_FALSE(matches(decimal, R"("2.5")"));
  CHECK_THAT(error_of(R"({"anyOf":[{"type":"strin"},{"type":"null"}]})"),
             Catch::Contains("unknown type"));
  CHECK_THAT(error_of(R"js({"anyOf":[{"multipleOf":0.5},{"pattern":"(?!a)"}]})js"),
             Catch::Contains("at /anyOf/0/multipleOf"));
  CHECK_THAT(error_of(R"({"anyOf":[{"type":"string","pattern":"(a"},{"type":"null"}]})"),
             Catch::Contains("unterminated group"));  // a syntax error is not left out
  const std::string refs = R"({"$defs":{"A":{"type":"string","pattern":"\\bx"}},)"
                           R"("anyOf":[{"$ref":"#/$defs/A"},{"type":"null"},{"$ref":"#/$defs/A"}]})";
  CHECK(matches(refs, "null"));
  CHECK_FALSE(matches(refs, R"("x")"));
  CHECK(matches(R"({"oneOf":[{"type":"integer"},{"type":"object","minProperties":1}]})", "7"));
  // propertyNames on a map: its keys as that string schema admits them.
  const std::string named = R"({"type":"object","propertyNames":{"pattern":"^[a-z]{1,3}$"},)"
                            R"("additionalProperties":{"type":"integer"}})";
  CHECK(matches(named, R"({"ab": 1, "c": 2})"));
  CHECK(matches(named, "{}"));
  CHECK_FALSE(matches(named, R"({"abcd": 1})"));
  CHECK_FALSE(matches(named, R"({"A": 1})"));
  CHECK(matches(R"({"propertyNames":{"enum":["x","y",3]}})", R"({"y": null})"));
  CHECK_FALSE(matches(R"({"propertyNames":{"enum":["x","y",3]}})", R"({"3": null})"));
  CHECK(matches(R"({"propertyNames":false})", "{}"));
  CHECK_THAT(error_of(R"({"propertyNames":{"type":"integer"}})"), Catch::Contains("no string"));
  CHECK_THAT(error_of(R"({"properties":{"a":{}},"propertyNames":{"maxLength":1}})"),
             Catch::Contains("at /propertyNames") && Catch::Contains("beside 'properties'"));
  // uniqueItems over a finite set: each value at most once, in the order listed.
  const std::string uniq = R"({"type":"array","items":{"enum":["x","y",1,1.0]},)"
                           R"("uniqueItems":true})";
  CHECK(matches(uniq, "[]"));
  CHECK(matches(uniq, R"(["x", "y", 1])"));
  CHECK(matches(uniq, R"(["y"])"));
  CHECK_FALSE(matches(uniq, R"(["y", "x"])"));
  CHECK_FALSE(matches(uniq, R"(["x", "x"])"));
  CHECK_FALSE(matches(uniq, R"([1, 1.0])"));  // equal values
  CHECK(matches(R"({"items":{"type":["boolean","null"]},"uniqueItems":true,"minItems":3})",
                "[false, true, null]"));
  CHECK_FALSE(matches(R"({"items":{"type":"boolean"},"uniqueItems":true,"maxItems":1})",
                      "[false, true]"));
  CHECK_THAT(error_of(R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})"),
             Catch::Contains("at /uniqueItems") && Catch::Contains("at most 64 values"));
  CHECK_THAT(error_of(R"({"items":{"enum":[1,2]},"uniqueItems":true,"minItems":3})"),
             Catch::Contains("more than the 2 distinct values"));
  CHECK_THAT(error_of(R"({"items":{"enum":[1]},"uniqueItems":"yes"})"),
             Catch::Contains("must be a boolean"));
  // Formats on strings only; unknown ones stay annotations.
  CHECK(matches(R"({"type":"integer","format":"int32"})", "-7"));
  CHECK(matches(R"({"type":"string","format":"color"})", R"("anything")"));
  CHECK(matches(R"({"format":"date"})", R"("2024-02-28")"));  // no type: a string
  CHECK_FALSE(matches(R"({"format":"date"})", R"("2024-02-30")"));
  CHECK(matches(R"({"type":"string","format":"date","maxLength":10})", R"("2024-02-28")"));
  CHECK_THAT(error_of(R"({"type":"string","format":"date","maxLength":9})"),
             Catch::Contains("admits no JSON value"));
  // Pattern strings write each character one way: escapes only where JSON needs them.
  CHECK(matches(R"({"pattern":"^[\\s\"]+$"})", R"(" \"\t\n")"));
  CHECK_FALSE(matches(R"({"pattern":"^[\\s\"]+$"})", R"(" \u0022")"));
  CHECK_FALSE(matches(R"({"pattern":"^a$"})", R"("\u0061")"));
  CHECK(matches(R"({"pattern":"^\\u0001$"})", R"("\u0001")"));
  CHECK_FALSE(matches(R"({"pattern":"^\\u0001$"})", R"("\u0001x")"));
  // Recursion through $ref, "#" included.
  const std::string list = R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},)"
                           R"({"type":"null"}]}},"required":["next"]})";
  CHECK(matches(list, R"({"next":{"next":{"next":null}}})"));
  CHECK_FALSE(matches(list, R"({"next":{"next":{}}})"));
}

// Bounds against exact arithmetic: every integer in [-130, 130], decimals with one or two
// fraction digits in (-16, 16) and with three or four next to each bound, in units of 10^-4,
// accepted exactly when within the bounds (numbers; integers only without a fraction), for
// bounds on both sides, either side, strict or not, integer or fractional.
TEST_CASE("json schema: minimum / maximum against exact arithmetic", "[json_schema]") {
  std::vector<std::string> texts = {"-0", "-0.0", "-0.00", "0.0", "01", "-01", "1e1", "1.", ".5",
                                    "+1", "--1", "0.000"};
  for (int v = -130; v <= 130; ++v) texts.push_back(std::to_string(v));
  for (int v = -1599; v <= 1599; v += 7) {
    const int a = std::abs(v);
    const std::string sign = v < 0 ? "-" : "";
    texts.push_back(fmt::format("{}{}.{:02d}", sign, a / 100, a % 100));
    if (a % 10 == 0) texts.push_back(fmt::format("{}{}.{}", sign, a / 100, a % 100 / 10));
  }
  // The value in 10^-4 of a text in the grammar's form; nullopt for other spellings.
  auto ten_thousandths = [](const std::string& t) -> std::optional<std::pair<int64_t, bool>> {
    static const std::regex form("(-?)(0|[1-9][0-9]*)(\\.([0-9]{1,4}))?");
    std::smatch m;
    if (!std::regex_match(t, m, form)) return std::nullopt;
    std::string frac = m[4].str();
    while (frac.size() < 4) frac += '0';
    const int64_t v = std::stoll(m[2].str()) * 10000 + std::stoll(frac);
    return std::make_pair(m[1].length() ? -v : v, m[3].matched);
  };
  const std::vector<std::string> bounds = {"", "-7", "-1", "0", "1", "5", "12", "100", "2.5",
                                           "-0.5", "0.25", "-1.75", "0.01", "-0.05", "9.99"};
  for (const auto& b : bounds) {
    if (b.empty()) continue;
    const auto c = std::llround(std::stod(b) * 10000);
    for (const int d : {-99, -10, -1, 1, 10, 99}) {
      const int64_t v = c + d, a = std::abs(v);
      texts.push_back(fmt::format("{}{}.{:04d}", v < 0 ? "-" : "", a / 10000, a % 10000));
    }
  }
  size_t checked = 0, accepted = 0;
  for (const bool integer : {false, true}) {
    for (const auto& lo : bounds) {
      for (const auto& hi : bounds) {
        for (int strict = 0; strict < 4; ++strict) {
          if (lo.empty() && hi.empty()) continue;  // no bound: exponents too (hand cases)
          OJson schema = {{"type", integer ? "integer" : "number"}};
          if (!lo.empty()) schema[strict & 1 ? "exclusiveMinimum" : "minimum"] = OJson::parse(lo);
          if (!hi.empty()) schema[strict & 2 ? "exclusiveMaximum" : "maximum"] = OJson::parse(hi);
          auto within = [&](int64_t v4) {
            if (!lo.empty()) {
              const auto l = std::llround(std::stod(lo) * 10000);
              if (strict & 1 ? v4 <= l : v4 < l) return false;
            }
            if (!hi.empty()) {
              const auto h = std::llround(std::stod(hi) * 10000);
              if (strict & 2 ? v4 >= h : v4 > h) return false;
            }
            return true;
          };
          bool any = false;
          for (const auto& t : texts) {
            const auto v = ten_thousandths(t);
            any = any || (v && within(v->first) && !(integer && v->second));
          }
          INFO(schema.dump());
          if (!any) {
            // Empty on this grid: either nothing fits, or only values between its points.
            continue;
          }
          const auto grammar = compile_json_schema(schema.dump(), "schema");
          const GrammarMatcher m(*grammar);
          for (const auto& t : texts) {
            const auto v = ten_thousandths(t);
            const bool expect = v && within(v->first) && !(integer && v->second);
            INFO(t);
            CHECK(m.matches(t) == expect);
            accepted += expect;
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked > 100000);
  CHECK(accepted > 20000);
  // multipleOf (integers): the multiples, written as integers, within any bounds.
  size_t multiples = 0;
  for (const int m : {1, 2, 3, 7, 10, 25, 100}) {
    for (const auto& [lo, hi] : std::vector<std::pair<std::string, std::string>>{
             {"", ""}, {"-100", "100"}, {"3", ""}, {"", "-4"}, {"-1", "1"}, {"11", "99"}}) {
      for (const bool integer : {false, true}) {
        OJson schema = {{"type", integer ? "integer" : "number"}, {"multipleOf", m}};
        if (!lo.empty()) schema["minimum"] = std::stoi(lo);
        if (!hi.empty()) schema["maximum"] = std::stoi(hi);
        bool any = false;
        auto expect = [&](const std::string& t) {
          const auto v = ten_thousandths(t);
          if (!v || v->second) return false;  // integers only
          const int64_t x = v->first / 10000;
          return (lo.empty() || x >= std::stoi(lo)) && (hi.empty() || x <= std::stoi(hi)) &&
                 x % m == 0;
        };
        for (const auto& t : texts) any = any || expect(t);
        if (!any) continue;
        INFO(schema.dump());
        const auto grammar = compile_json_schema(schema.dump(), "schema");
        const GrammarMatcher mm(*grammar);
        for (const auto& t : texts) {
          INFO(t);
          CHECK(mm.matches(t) == expect(t));
          multiples += expect(t);
        }
        // Past the grid: 16 digits.
        if (lo.empty() && hi.empty()) {
          CHECK(mm.matches(std::to_string(9999999999999000 / m * m)));
          CHECK(mm.matches(fmt::format("-{}", 1234567890123000 / m * m)));
          CHECK(mm.matches(std::to_string(9999999999999999 / m * m + (m > 1 ? 1 : 0))) == (m == 1));
        }
      }
    }
  }
  CHECK(multiples > 1000);
  // Bounds finer than the 16 fraction digits written, and a double's shortest form.
  const auto tiny = compile_json_schema(R"({"type":"number","exclusiveMinimum":1e-300,)"
                                        R"("maximum":0.1})", "s");
  CHECK(GrammarMatcher(*tiny).matches("0.0000000000000001"));
  CHECK(GrammarMatcher(*tiny).matches("0.1"));
  CHECK(GrammarMatcher(*tiny).matches("0.1000"));
  CHECK_FALSE(GrammarMatcher(*tiny).matches("0.1001"));
  CHECK_FALSE(GrammarMatcher(*tiny).matches("0.0"));
  CHECK_FALSE(GrammarMatcher(*tiny).matches("-0.0"));
  CHECK_FALSE(GrammarMatcher(*tiny).matches("0"));
  CHECK_THAT(error_of(R"({"type":"number","exclusiveMinimum":0.1,"maximum":0.1})"),
             Catch::Contains("no number lies within the bounds"));
  for (const char* text : {"2.5", "-0.125", "1e-05", "1.5e+3", "0.0", "-0", "7E2", "12"}) {
    INFO(text);
    const auto b = decimal_bound(text, false);
    REQUIRE(b);
    CHECK(std::stod(text) == (b->negative ? -1 : 1) *
                                 (static_cast<double>(b->whole) +
                                  (b->frac.empty() ? 0.0 : std::stod("0." + b->frac))));
  }
  CHECK(decimal_bound("1.5e+20", false)->whole == kMaxNumberMagnitude + 1);  // saturates
  for (const char* text : {"", "-", "1e", "1.2.3", "e5", "1x", "--1"}) {
    CHECK_FALSE(decimal_bound(text, false));
  }
  // The 16-digit cap: a bound beyond it leaves the numbers the grammar writes.
  const auto big = compile_json_schema(R"({"type":"integer","minimum":-1e30,"maximum":1e30})", "s");
  CHECK(GrammarMatcher(*big).matches("-9999999999999999"));
  CHECK_FALSE(GrammarMatcher(*big).matches("10000000000000000"));
  const auto near = compile_json_schema(
      R"({"type":"integer","minimum":9007199254740993,"maximum":9007199254740995})", "s");
  CHECK(GrammarMatcher(*near).matches("9007199254740994"));
  CHECK_FALSE(GrammarMatcher(*near).matches("9007199254740992"));
  CHECK_FALSE(GrammarMatcher(*near).matches("9007199254740996"));
}

TEST_CASE("json schema: unsupported or bad schemas are refused naming the keyword",
          "[json_schema]") {
  CHECK_THAT(error_of(R"({"type":"object","minProperties":1})"),
             Catch::Contains("/minProperties") &&
                 Catch::Contains("'minProperties' is not supported"));
  CHECK_THAT(error_of(R"({"type":"number","multipleOf":0.01})"),
             Catch::Contains("at /multipleOf") && Catch::Contains("fractional"));
  CHECK_THAT(error_of(R"({"type":"integer","multipleOf":101})"), Catch::Contains("up to 100 "));
  CHECK_THAT(error_of(R"({"type":"integer","multipleOf":0})"), Catch::Contains("above 0"));
  CHECK_THAT(error_of(R"({"type":"integer","multipleOf":-2})"), Catch::Contains("above 0"));
  CHECK_THAT(error_of(R"({"type":"integer","multipleOf":"2"})"), Catch::Contains("above 0"));
  CHECK_THAT(error_of(R"({"type":"integer","multipleOf":7,"minimum":1,"maximum":6})"),
             Catch::Contains("no integer lies within the bounds"));
  CHECK_THAT(error_of(R"({"type":"integer","minimum":"0"})"), Catch::Contains("must be a number"));
  CHECK_THAT(error_of(R"({"type":"integer","minimum":5,"exclusiveMaximum":5})"),
             Catch::Contains("no integer lies within the bounds"));
  CHECK_THAT(error_of(R"({"type":"number","exclusiveMinimum":1e300})"),
             Catch::Contains("no number lies within the bounds"));
  // oneOf: only where no value can match two branches.
  CHECK_THAT(error_of(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})"),
             Catch::Contains("at /oneOf") && Catch::Contains("cannot overlap"));
  CHECK_THAT(error_of(R"({"oneOf":[{"type":"string"},{"maxLength":2}]})"),
             Catch::Contains("cannot overlap"));
  CHECK_THAT(error_of(R"({"oneOf":[{"properties":{"k":{"const":1}},"required":["k"]},)"
                      R"({"properties":{"k":{"const":1}},"required":["k"]}]})"),
             Catch::Contains("cannot overlap"));
  CHECK_THAT(error_of(R"({"oneOf":[{"properties":{"k":{"const":1}}},)"
                      R"({"properties":{"k":{"const":2}},"required":["k"]}]})"),
             Catch::Contains("cannot overlap"));  // k optional in the first: {} matches both
  CHECK_THAT(error_of(R"({"oneOf":[{"type":["object","string"],"properties":{"k":{"const":1}},)"
                      R"("required":["k"]},{"properties":{"k":{"const":2}},"required":["k"]}]})"),
             Catch::Contains("cannot overlap"));  // "a" from the first matches the second
  {
    const auto g = compile_json_schema(
        R"({"oneOf":[{"type":["integer","number"]},{"type":"string"},{"const":true}]})", "s");
    const GrammarMatcher m(*g);
    CHECK(m.matches("1.5"));
    CHECK(m.matches(R"("x")"));
    CHECK(m.matches("true"));
    CHECK_FALSE(m.matches("false"));
  }
  // Patterns: what the dialects read differently, or a regex engine cannot follow, is named.
  for (const auto& [pattern, what] : std::vector<std::pair<std::string, std::string>>{
           {"(?=a)", "lookaround"}, {"(?<!a)b", "lookaround"}, {"(a)\\1", "backreferences"},
           {"\\bword", "word boundaries"}, {"(?i)a", "inline flags"}, {"\\p{L}", "\\p"},
           {"a{,3}", "not a quantifier"}, {"a{2", "not a quantifier"}, {"[]a]", "first in a class"},
           {"a**", "after a quantifier"}, {"*a", "nothing to repeat"}, {"(a", "unterminated group"},
           {"a)", "unmatched ')'"}, {"[a", "unterminated class"}, {"[z-a]", "out of order"},
           {"[\\d-z]", "shorthand"}, {"^*", "on an anchor"}, {"a{1001}", "above 1000"},
           {"\\a", "\\a is not supported"}, {"\\x4", "hex digits"}, {"\\01", "octal"},
           {"(?:a{1000}){1000}", "automaton states"}, {"x^y", "matches no string"},
           {"(?:a?){1000}", "too ambiguous"}}) {
    INFO(pattern);
    CHECK_THAT(error_of(OJson{{"type", "string"}, {"pattern", pattern}}.dump()),
               Catch::Contains("at /pattern") && Catch::Contains(what));
  }
  CHECK_THAT(error_of(R"({"type":"string","pattern":7})"), Catch::Contains("must be a string"));
  CHECK_THAT(error_of(R"({"type":"string","pattern":"^a$","format":"date"})"),
             Catch::Contains("at /format") && Catch::Contains("beside 'pattern'"));
  CHECK_THAT(error_of(R"({"type":"string","pattern":"^[a-z]{5000}$"})"),
             Catch::Contains("above 1000"));
  // Lengths multiply the pattern's states: bounded by the grammar's rule cap.
  std::string loops = "^";
  for (int i = 0; i < 6; ++i) loops += "[a-z]*[0-9]*[A-Z]*";
  CHECK_THAT(error_of(OJson{{"type", "string"}, {"pattern", loops + "$"}, {"maxLength", 4096}}
                          .dump()),
             Catch::Contains("grammar rules"));
  CHECK_THAT(error_of(R"({"$ref":"#/$defs/missing"})"), Catch::Contains("does not resolve"));
  CHECK_THAT(error_of(R"({"$ref":"http://example.com/s.json"})"), Catch::Contains("local"));
  CHECK_THAT(error_of("false"), Catch::Contains("admits no value"));
  CHECK_THAT(error_of(R"({"type":"strin"})"), Catch::Contains("unknown type"));
  CHECK_THAT(error_of(R"({"type":[]})"), Catch::Contains("empty list"));
  CHECK_THAT(error_of(R"({"anyOf":[]})"), Catch::Contains("'anyOf'"));
  CHECK_THAT(error_of(R"({"allOf":[{},{}]})"), Catch::Contains("'allOf'"));
  CHECK_THAT(error_of(R"({"type":"string","maxLength":1,"minLength":2})"),
             Catch::Contains("'maxLength' is less than 'minLength'"));
  CHECK_THAT(error_of(R"({"type":"string","maxLength":100000})"), Catch::Contains("[0, 4096]"));
  CHECK_THAT(error_of(R"({"type":"string","maxLength":-1})"), Catch::Contains("[0, 4096]"));
  CHECK_THAT(error_of(R"({"type":"array","uniqueItems":true})"),
             Catch::Contains("/uniqueItems") && Catch::Contains("needs 'items'"));
  CHECK_THAT(error_of(R"({"enum":[]})"), Catch::Contains("'enum'"));
  CHECK_THAT(error_of(R"({"type":"integer","enum":["a"]})"), Catch::Contains("no 'enum'"));
  CHECK_THAT(error_of("[1]"), Catch::Contains("an object or a boolean"));
  // Assertions beside a combinator or a fixed value would need both applied: refused.
  CHECK_THAT(error_of(R"({"$ref":"#/$defs/a","maxLength":3,"$defs":{"a":{"type":"string"}}})"),
             Catch::Contains("at /maxLength") && Catch::Contains("beside '$ref'"));
  CHECK_THAT(error_of(R"({"type":"object","anyOf":[{"type":"null"}]})"),
             Catch::Contains("at /type") && Catch::Contains("beside 'anyOf'"));
  CHECK_THAT(error_of(R"({"enum":["abc"],"maxLength":1})"), Catch::Contains("beside 'enum'"));
  CHECK_THAT(error_of("{"), Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of(std::string(200, '[') + std::string(200, ']')), Catch::Contains("deeper"));
  // A schema whose every instance is infinite: nothing can be generated.
  CHECK_THAT(error_of(R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})"),
             Catch::Contains("admits no JSON value"));
  CHECK_THAT(error_of(R"({"$ref":"#"})"), Catch::Contains("admits no JSON value"));
  // Refused keywords are named whatever their content; annotations are not refused.
  CHECK(error_of(R"({"title":"t","description":"d","default":1,"examples":[2],)"
                 R"("$schema":"https://json-schema.org/draft/2020-12/schema","type":"integer"})")
            .empty());
}

TEST_CASE("grammar: left recursion and empty cycles are refused, dead ends pruned",
          "[json_schema]") {
  {
    Grammar g;
    const uint32_t r = g.add_rule();  // r ::= r 'a' | 'b'  (left recursive)
    g.add_alt(r, {Grammar::rule_symbol(r), g.byte('a')});
    g.add_alt(r, {g.byte('b')});
    CHECK_THROWS_WITH(g.finalize(), Catch::Contains("left recursion"));
  }
  {
    Grammar g;
    const uint32_t s = g.add_rule();  // s ::= e t ; e ::= "" ; t ::= s | 'x'  (no byte read)
    const uint32_t e = g.add_rule();
    const uint32_t t = g.add_rule();
    g.add_alt(s, {Grammar::rule_symbol(e), Grammar::rule_symbol(t)});
    g.add_alt(e, {});
    g.add_alt(t, {Grammar::rule_symbol(s)});
    g.add_alt(t, {g.byte('x')});
    CHECK_THROWS_WITH(g.finalize(), Catch::Contains("left recursion"));
  }
  {
    Grammar g;
    const uint32_t root = g.add_rule();  // root ::= 'a' x | 'b' ; x ::= 'c' x  (x: no end)
    const uint32_t x = g.add_rule();
    g.add_alt(root, {g.byte('a'), Grammar::rule_symbol(x)});
    g.add_alt(root, {g.byte('b')});
    g.add_alt(x, {g.byte('c'), Grammar::rule_symbol(x)});
    g.finalize();
    const GrammarMatcher m(g);
    CHECK(m.matches("b"));
    CHECK(m.step(m.start(), 'a').empty());  // a prefix that could never end is not taken
  }
  {
    Grammar g;
    const uint32_t root = g.add_rule();  // root ::= 'a' root
    g.add_alt(root, {g.byte('a'), Grammar::rule_symbol(root)});
    CHECK_THROWS_WITH(g.finalize(), Catch::Contains("no finite text"));
  }
  {
    // Deep right recursion: past the stack cap the recogniser takes less, never more.
    Grammar g;
    const uint32_t root = g.add_rule();  // root ::= '(' root ')' | 'x'
    g.add_alt(root, {g.byte('('), Grammar::rule_symbol(root), g.byte(')')});
    g.add_alt(root, {g.byte('x')});
    g.finalize();
    const GrammarMatcher m(g);
    CHECK(m.matches("((x))"));
    CHECK_FALSE(m.matches("((x)"));
    CHECK_FALSE(m.matches(std::string(1000, '(') + "x" + std::string(1000, ')')));
  }
}

TEST_CASE("grammar constraint: sampled texts over a synthetic vocabulary follow the schema",
          "[json_schema]") {
  auto vocab = std::make_shared<TokenBytes>();
  for (int b = 0x20; b < 0x7f; ++b) vocab->bytes.emplace_back(1, static_cast<char>(b));
  for (const char* p : {"{\"", "\":", "\",\"", "\"}", "}}", "]}", "[{", "true", "false", "null",
                        "\"name\"", "\"age\":", "12", ".5", "e-3", "\xc3\xa9", "\xe2\x82",
                        "\xac", "\\n", "\\u00", "\n  ", "}\n", "\"red\"", ":[", "\"tags\":[\""}) {
    vocab->bytes.emplace_back(p);
  }
  vocab->bytes.emplace_back("");  // a special token: no bytes
  const auto eos = static_cast<int32_t>(vocab->bytes.size());
  vocab->bytes.emplace_back("");
  vocab->build_trie();
  const std::vector<int32_t> eos_ids = {eos};
  const size_t n_vocab = vocab->bytes.size();
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},)"
      R"("age":{"type":"integer"},"color":{"enum":["red","green"]},)"
      R"("tags":{"type":"array","items":{"type":"string"},"maxItems":2}},)"
      R"("required":["name","color"]})";
  const auto grammar = compile_json_schema(schema, "s");
  const GrammarMatcher m(*grammar);

  std::mt19937 g(7);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  int ended = 0;
  for (int run = 0; run < 200; ++run) {
    SamplingParams p;
    p.seed = static_cast<uint64_t>(run);
    p.temperature = run % 5 == 0 ? 0.0f : 1.0f;
    Sampler sampler(p);
    auto c = std::make_unique<GrammarConstraint>(grammar, vocab, eos_ids, "response_format");
    GrammarConstraint* gc = c.get();
    sampler.set_constraint(std::move(c));
    std::string text;
    for (int step = 0; step < 300; ++step) {
      std::vector<float> logits(n_vocab);
      for (float& l : logits) l = noise(g);
      for (char close : {'}', ']', '"'}) logits[static_cast<size_t>(close - 0x20)] += 2.5f;
      logits[static_cast<size_t>(eos)] += 3.0f;
      const SampleResult r = sampler.sample(logits, {});
      if (r.id == eos) {
        REQUIRE(gc->done());
        INFO(text);
        REQUIRE(m.matches(text));
        const OJson doc = OJson::parse(text);  // and it is JSON, with the schema's shape
        CHECK(doc.is_object());
        CHECK(doc.contains("name"));
        CHECK(doc["name"].is_string());
        CHECK((doc["color"] == "red" || doc["color"] == "green"));
        if (doc.contains("tags")) CHECK(doc["tags"].size() <= 2);
        ++ended;
        break;
      }
      REQUIRE(!vocab->bytes[static_cast<size_t>(r.id)].empty());
      text += vocab->bytes[static_cast<size_t>(r.id)];
    }
  }
  CHECK(ended > 100);

  // End only once complete, then nothing else; an id the mask refused throws if accepted.
  GrammarConstraint gc(grammar, vocab, eos_ids, "response_format");
  std::vector<float> logits(n_vocab, 1.0f);
  gc.mask(logits);
  CHECK(std::isinf(logits[static_cast<size_t>(eos)]));
  CHECK_FALSE(std::isinf(logits[static_cast<size_t>('{' - 0x20)]));
  CHECK(std::isinf(logits[static_cast<size_t>('[' - 0x20)]));
  CHECK_THROWS_AS(gc.accept(static_cast<int32_t>('[' - 0x20)), Error);
  for (const char ch : std::string(R"({"name":"","color":"red"})")) {
    gc.accept(static_cast<int32_t>(ch - 0x20));
  }
  REQUIRE(gc.done());
  std::fill(logits.begin(), logits.end(), 1.0f);
  gc.mask(logits);
  for (size_t i = 0; i < n_vocab; ++i) CHECK(std::isinf(logits[i]) == (i != size_t(eos)));
}
