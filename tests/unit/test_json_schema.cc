// JSON-schema constrained decoding: the schema compiler and the grammar recogniser
// (json_schema.h, grammar.h) against Python's jsonschema as the reference (cases labelled by
// tests/reference/make_json_schema_cases.py: the grammar must accept no text jsonschema refuses,
// and every document built in the promised form), the schema errors, grammars that would loop,
// and GrammarConstraint driving a Sampler over a synthetic vocabulary.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/grammar.h"
#include "engine/runtime/grammar_constraint.h"
#include "engine/runtime/json_schema.h"
#include "engine/runtime/sampler.h"

using namespace sampan;
using namespace sampan::runtime;
using OJson = nlohmann::ordered_json;

namespace {

OJson load_cases() {
  std::ifstream f(std::string(SAMPAN_SOURCE_DIR) + "/tests/data/json_schema/cases.json");
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
  // Recursion through $ref, "#" included.
  const std::string list = R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},)"
                           R"({"type":"null"}]}},"required":["next"]})";
  CHECK(matches(list, R"({"next":{"next":{"next":null}}})"));
  CHECK_FALSE(matches(list, R"({"next":{"next":{}}})"));
}

TEST_CASE("json schema: unsupported or bad schemas are refused naming the keyword",
          "[json_schema]") {
  CHECK_THAT(error_of(R"({"type":"string","pattern":"^a"})"),
             Catch::Contains("/pattern") && Catch::Contains("'pattern' is not supported"));
  CHECK_THAT(error_of(R"({"properties":{"n":{"type":"integer","minimum":0}}})"),
             Catch::Contains("at /properties/n/minimum"));
  CHECK_THAT(error_of(R"({"oneOf":[{"type":"string"}]})"), Catch::Contains("'oneOf'"));
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
  CHECK_THAT(error_of(R"({"type":"array","uniqueItems":true})"), Catch::Contains("uniqueItems"));
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
