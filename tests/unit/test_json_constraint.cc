// JSON mode: the byte-level recogniser (json_grammar.h) against nlohmann::json's parser as the
// reference (random documents, pretty and compact, and every one-byte mutation of them), hand
// cases for its limits and for what JSON forbids, and JsonConstraint driving a Sampler over a
// synthetic vocabulary: every text that ends with end-of-sequence parses as an object.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/json_constraint.h"
#include "engine/runtime/json_grammar.h"
#include "engine/runtime/sampler.h"

using namespace sampan;
using namespace sampan::runtime;
using Json = nlohmann::json;

namespace {

// Bytes of `text` the recogniser takes before refusing one (text.size() when it takes all).
size_t accepted_prefix(const std::string& text, JsonState s = {}) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!json_step(s, static_cast<uint8_t>(text[i]))) return i;
  }
  return text.size();
}

bool accepts_whole(const std::string& text, bool root_object = true) {
  JsonState s;
  s.root_object = root_object;
  for (const char c : text) {
    if (!json_step(s, static_cast<uint8_t>(c))) return false;
  }
  return json_done(s);
}

// A random JSON value: nested objects and arrays, strings of ASCII, escapes and multi-byte
// characters, integers, floats, exponents, literals.
Json random_value(std::mt19937& g, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 3 ? 5 : 7);
  auto rand_string = [&] {
    static const char* pieces[] = {"a", "key", " ", "\"", "\\", "/", "\n", "\t", "\x01",
                                   "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xe4\xb8\xad",
                                   "0", "}", "]", ",", ":"};
    std::uniform_int_distribution<int> n(0, 6), p(0, 17);
    std::string s;
    for (int i = n(g); i > 0; --i) s += pieces[p(g)];
    return s;
  };
  switch (kind(g)) {
    case 0: return Json(rand_string());
    case 1: return Json(std::uniform_int_distribution<int64_t>(-100000, 100000)(g));
    case 2: return Json(std::uniform_real_distribution<double>(-1e6, 1e6)(g));
    case 3: return Json(std::uniform_real_distribution<double>(-1, 1)(g) * 1e-30);
    case 4: return Json(static_cast<bool>(g() & 1));
    case 5: return Json(nullptr);
    case 6: {
      Json a = Json::array();
      for (int i = std::uniform_int_distribution<int>(0, 4)(g); i > 0; --i)
        a.push_back(random_value(g, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      for (int i = std::uniform_int_distribution<int>(0, 4)(g); i > 0; --i)
        o[rand_string()] = random_value(g, depth + 1);
      return o;
    }
  }
}

Json random_object(std::mt19937& g) {
  Json o = Json::object();
  for (int i = std::uniform_int_distribution<int>(0, 5)(g); i > 0; --i) {
    std::string key = "k";  // (not "k" + to_string: GCC 12 warns -Wrestrict on that, wrongly)
    key += std::to_string(i);
    o[key] = random_value(g, 1);
  }
  return o;
}

// The reference: nlohmann parses the text and its root is an object. A number past double's
// range is valid JSON (Python's json reads it as inf) that nlohmann refuses as out_of_range 406,
// after checking the grammar of the whole text: that counts as accepted. Texts nlohmann and JSON
// mode treat differently on purpose are left out by the caller: \u escapes (nlohmann refuses
// lone surrogates, Python's json and JSON mode take them) and whitespace around the root (JSON
// mode starts and ends with the root's bytes).
bool reference_accepts(const std::string& text) {
  try {
    return Json::parse(text).is_object();
  } catch (const Json::out_of_range& e) {
    if (e.id != 406) return false;
    // Overflow: the grammar held up to the number; whether the rest does is asked again with the
    // number's exponent cut to one digit (same grammar, in range).
    std::string t = text;
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      if ((t[i] == 'e' || t[i] == 'E')) {
        size_t j = i + 1;
        if (j < t.size() && (t[j] == '+' || t[j] == '-')) ++j;
        size_t k = j;
        while (k < t.size() && t[k] >= '0' && t[k] <= '9') ++k;
        if (k > j + 1) t.erase(j + 1, k - j - 1);
      }
    }
    return t != text && reference_accepts(t);
  } catch (const Json::exception&) {
    return false;
  }
}

}  // namespace

TEST_CASE("json grammar: random documents and all their one-byte mutations agree with nlohmann",
          "[json]") {
  std::mt19937 g(2024);
  int compared = 0, mutated_valid = 0;
  for (int doc = 0; doc < 300; ++doc) {
    const Json v = random_object(g);
    for (int indent : {-1, 2}) {
      const std::string text = v.dump(indent);
      INFO(text);
      REQUIRE(accepts_whole(text));
      // Every proper prefix is accepted but not complete.
      JsonState s;
      for (size_t i = 0; i + 1 < text.size(); ++i) {
        REQUIRE(json_step(s, static_cast<uint8_t>(text[i])));
        REQUIRE_FALSE(json_done(s));
      }
      for (int m = 0; m < 40; ++m) {
        std::string t = text;
        const size_t at = std::uniform_int_distribution<size_t>(0, t.size() - 1)(g);
        static const char kBytes[] = "{}[],:\"\\ 0123456789.eE+-tfnulrsa\x01\x7f\x80\xc3\xe2\xff";
        const char b = kBytes[std::uniform_int_distribution<size_t>(0, sizeof(kBytes) - 2)(g)];
        switch (m % 3) {
          case 0: t[at] = b; break;
          case 1: t.insert(at, 1, b); break;
          default: t.erase(at, 1); break;
        }
        if (t.find("\\u") != std::string::npos || t.empty()) continue;
        const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
        if (ws(t.back()) || ws(t.front())) continue;
        INFO("mutated: " << t);
        const bool want = reference_accepts(t);
        CHECK(accepts_whole(t) == want);
        ++compared;
        mutated_valid += want ? 1 : 0;
      }
    }
  }
  CHECK(compared > 10000);
  CHECK(mutated_valid > 100);  // mutations that stay valid were compared too
}

TEST_CASE("json grammar: hand cases — what JSON forbids, root objects, and the limits", "[json]") {
  for (const char* ok : {R"({})", R"({"a":1})", R"({ "a" : [1, -0.5e+3, true, false, null]})",
                         R"({"a":{"b":{"c":[]}}})", R"({"\u00e9\ud83d":"\"\\\/\b\f\n\r\t"})",
                         "{\"\xe2\x82\xac\":\"\xf0\x9f\x98\x80\"}", R"({"n":0,"m":-0,"e":1E-7})"}) {
    INFO(ok);
    CHECK(accepts_whole(ok));
  }
  // (text, bytes accepted before the refusal)
  const std::vector<std::pair<std::string, size_t>> bad = {
      {"[1]", 0},                  // the root must be an object
      {"\"s\"", 0},
      {"{\"a\":01}", 6},           // leading zero
      {"{\"a\":1.}", 7},           // a digit must follow '.'
      {"{\"a\":.5}", 5},
      {"{\"a\":+1}", 5},
      {"{\"a\":1e}", 7},
      {"{\"a\":tru}", 8},
      {"{\"a\":True}", 5},
      {"{a:1}", 1},                // keys are strings
      {"{\"a\" 1}", 5},
      {"{\"a\":1,}", 7},           // trailing comma
      {"{\"a\":[1,]}", 8},
      {"{\"a\":1]", 6},            // mismatched close
      {"{\"a\":\"x\ty\"}", 7},     // raw control character in a string
      {"{\"a\":\"\\x\"}", 7},      // unknown escape
      {"{\"a\":\"\\u12g4\"}", 10},
      {"{\"a\":\"\xc0\xaf\"}", 6},   // overlong
      {"{\"a\":\"\xed\xa0\x80\"}", 7},  // UTF-16 surrogate as UTF-8
      {"{\"a\":\"\xf4\x90\x80\x80\"}", 7},  // past U+10FFFF
      {"{\"a\":\"\x80\"}", 6},     // continuation without a lead
      {"{\"a\":\"\xc3\"}", 7},     // a lead without its continuation
      {"{} ", 2},                  // nothing after the root
      {" {}", 0},                  // nor before it
      {"{}{}", 2},
  };
  for (const auto& [text, at] : bad) {
    INFO(text);
    CHECK(accepted_prefix(text) == at);
  }
  // Nesting up to kMaxDepth.
  std::string deep = "{\"a\":";
  for (int d = 1; d < JsonState::kMaxDepth; ++d) deep += "[";
  CHECK(accepted_prefix(deep) == deep.size());
  CHECK(accepted_prefix(deep + "[") == deep.size());
  // Whitespace runs and number lengths.
  const std::string ws(JsonState::kMaxWhitespace, ' ');
  CHECK(accepted_prefix("{" + ws + "}") == ws.size() + 2);
  CHECK(accepted_prefix("{" + ws + " }") == ws.size() + 1);
  const std::string num(JsonState::kMaxNumberBytes, '1');
  CHECK(accepts_whole("{\"a\":" + num + "}"));
  CHECK(accepted_prefix("{\"a\":" + num + "1}") == 5 + num.size());
  // Any root when asked (a root number is complete once it may end).
  CHECK(accepts_whole("[1,2]", false));
  CHECK(accepts_whole("12.5", false));
  CHECK_FALSE(accepts_whole("12.", false));
}

TEST_CASE("json constraint: sampled texts over a synthetic vocabulary parse as objects",
          "[json]") {
  // Single bytes (so every continuation exists), multi-byte pieces that cross structure, words,
  // a special-like empty token (never allowed) and two end-of-sequence ids.
  auto vocab = std::make_shared<TokenBytes>();
  for (int b = 0x20; b < 0x7f; ++b) vocab->bytes.emplace_back(1, static_cast<char>(b));
  for (const char* p : {"{\"", "\":", "\",\"", "\"}", "}}", "]}", "[{", "true", "false", "null",
                        " \"key\"", "12", ".5", "e-3", "\xc3\xa9", "\xe2\x82", "\xac", "\\n",
                        "\\u00", "\n  ", "}\n", "\"a\"", ":["}) {
    vocab->bytes.emplace_back(p);
  }
  vocab->bytes.emplace_back("");  // a special token: no bytes
  const auto eos = static_cast<int32_t>(vocab->bytes.size());
  vocab->bytes.emplace_back("");
  vocab->bytes.emplace_back("");
  const std::vector<int32_t> eos_ids = {eos, eos + 1};
  const size_t n_vocab = vocab->bytes.size();

  std::mt19937 g(5);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  int ended = 0;
  for (int run = 0; run < 200; ++run) {
    SamplingParams p;
    p.seed = static_cast<uint64_t>(run);
    p.temperature = run % 5 == 0 ? 0.0f : 1.0f;
    p.top_p = run % 3 == 0 ? 0.9f : 1.0f;
    Sampler s(p);
    auto c = std::make_unique<JsonConstraint>(vocab, eos_ids);
    JsonConstraint* jc = c.get();
    s.set_constraint(std::move(c));
    std::string text;
    bool stopped = false;
    for (int step = 0; step < 400 && !stopped; ++step) {
      std::vector<float> logits(n_vocab);
      for (float& l : logits) l = noise(g);
      // Lean towards closing so that most texts end: '}' ']' '"' and the end ids.
      for (char close : {'}', ']', '"'}) logits[static_cast<size_t>(close - 0x20)] += 2.5f;
      logits[static_cast<size_t>(eos)] += 3.0f;
      const std::vector<int32_t> seen;
      const SampleResult r = s.sample(logits, seen);
      if (r.id == eos || r.id == eos + 1) {
        REQUIRE(jc->done());
        stopped = true;
        break;
      }
      REQUIRE(r.id >= 0);
      REQUIRE(!vocab->bytes[static_cast<size_t>(r.id)].empty());
      text += vocab->bytes[static_cast<size_t>(r.id)];
      INFO(text);
      REQUIRE(accepted_prefix(text) == text.size());
    }
    if (stopped) {
      INFO(text);
      REQUIRE(accepts_whole(text));
      if (text.find("\\u") == std::string::npos) CHECK(reference_accepts(text));
      ++ended;
    }
  }
  CHECK(ended > 100);

  // The mask: nothing but the end ids once the object is complete; an id the mask refused is
  // an internal error if drawn anyway.
  JsonConstraint jc(vocab, eos_ids);
  for (const char ch : std::string("{}")) jc.accept(static_cast<int32_t>(ch - 0x20));
  REQUIRE(jc.done());
  std::vector<float> logits(n_vocab, 1.0f);
  jc.mask(logits);
  for (size_t i = 0; i < n_vocab; ++i) {
    const bool is_eos = i == static_cast<size_t>(eos) || i == static_cast<size_t>(eos) + 1;
    CHECK(std::isinf(logits[i]) == !is_eos);
  }
  CHECK_THROWS_AS(jc.accept(static_cast<int32_t>('a' - 0x20)), Error);
  CHECK_THROWS_AS(JsonConstraint(vocab, {}), Error);
}
