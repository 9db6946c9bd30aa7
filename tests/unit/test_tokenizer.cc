// Exact-match tests against llama.cpp's tokenizer vectors (../shared/fixtures/tokenizers: each
// .gguf vocabulary with .inp texts and the .out ids HF `tokenizers` produced for them), plus
// decode round trips and the streaming decoder.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/pretokenizer_table.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_impl.h"

namespace {

namespace fs = std::filesystem;
using sampan::tok::Tokenizer;

const fs::path kFixtures = fs::path(SAMPAN_SOURCE_DIR) / ".." / "shared" / "fixtures" / "tokenizers";
const char* const kNames[] = {"gpt-2", "llama-spm", "phi-3", "bert-bge", "deepseek-llm", "falcon"};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t j; (j = s.find(sep, pos)) != std::string::npos; pos = j + sep.size()) out.push_back(s.substr(pos, j - pos));
  out.push_back(s.substr(pos));
  return out;
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  for (int32_t v; in >> v;) ids.push_back(v);
  return ids;
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> load_cases(const std::string& name) {
  const fs::path base = kFixtures / ("ggml-vocab-" + name + ".gguf");
  std::vector<std::string> texts = split(slurp(base.string() + ".inp"), "\n__ggml_vocab_test__\n");
  std::vector<std::string> lines = split(slurp(base.string() + ".out"), "\n");
  texts.pop_back();  // the file ends with a separator
  lines.pop_back();
  REQUIRE(texts.size() == lines.size());
  std::vector<Case> cases;
  for (size_t i = 0; i < texts.size(); ++i) cases.push_back({texts[i], parse_ids(lines[i])});
  return cases;
}

// A missing fixture fails the test (no test passes by skipping): ../shared must sit beside the
// checkout, as CI has it.
bool have_fixtures() {
  INFO("tokenizer fixtures expected at " << kFixtures.string() << " (../shared beside the checkout)");
  REQUIRE(fs::exists(kFixtures));
  return true;
}

}  // namespace

TEST_CASE("GGUF vocabularies reproduce the reference ids exactly", "[tokenizer]") {
  if (!have_fixtures()) return;
  for (const char* name : kNames) {
    auto tok = sampan::tok::load_tokenizer((kFixtures / (std::string("ggml-vocab-") + name + ".gguf")).string());
    const auto cases = load_cases(name);
    CHECK(cases.size() >= 40);
    size_t failed = 0;
    for (const Case& c : cases) {
      const std::vector<int32_t> got = tok->encode(c.text, false);
      if (got != c.ids) {
        ++failed;
        UNSCOPED_INFO(name << ": text '" << c.text << "'");
      }
      CHECK(got == c.ids);
    }
    INFO(name << ": " << failed << " of " << cases.size() << " vectors differ");
    CHECK(failed == 0);
  }
}

TEST_CASE("decode inverts encode on the reference texts", "[tokenizer]") {
  if (!have_fixtures()) return;
  // BERT lowercases and strips accents, so only the byte-level and SentencePiece families are
  // exact round trips.
  for (const char* name : {"gpt-2", "llama-spm", "phi-3", "deepseek-llm", "falcon"}) {
    auto tok = sampan::tok::load_tokenizer((kFixtures / (std::string("ggml-vocab-") + name + ".gguf")).string());
    const bool spm = tok->kind() == sampan::tok::TokenizerKind::kSentencePieceBpe;
    for (const Case& c : load_cases(name)) {
      std::string want = c.text;
      // SentencePiece's decoder strips the one space its normalizer prepended.
      const std::string got = tok->decode(tok->encode(c.text, false));
      INFO(name << ": '" << c.text << "'");
      if (spm && want.empty()) CHECK(got.empty());
      else CHECK(got == want);
    }
  }
}

TEST_CASE("StreamDecoder output concatenates to decode and never splits a character", "[tokenizer]") {
  if (!have_fixtures()) return;
  for (const char* name : kNames) {
    auto tok = sampan::tok::load_tokenizer((kFixtures / (std::string("ggml-vocab-") + name + ".gguf")).string());
    for (const Case& c : load_cases(name)) {
      std::vector<int32_t> ids = tok->encode(c.text, true);
      sampan::tok::StreamDecoder sd(*tok, true);
      std::string joined;
      for (int32_t id : ids) {
        const std::string piece = sd.push(id);
        // every piece is whole UTF-8: its last lead byte announces no more bytes than remain
        size_t i = 0;
        bool whole = true;
        while (i < piece.size()) {
          const auto b = static_cast<uint8_t>(piece[i]);
          const size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
          if (i + len > piece.size()) whole = false;
          i += len;
        }
        INFO(name << ": '" << c.text << "'");
        CHECK(whole);
        joined += piece;
      }
      joined += sd.flush();
      INFO(name << ": '" << c.text << "'");
      CHECK(joined == tok->decode(ids, true));
    }
  }
}

TEST_CASE("StreamDecoder holds back byte-fallback pieces of one character", "[tokenizer]") {
  if (!have_fixtures()) return;
  auto tok = sampan::tok::load_tokenizer((kFixtures / "ggml-vocab-llama-spm.gguf").string());
  // U+1F999 (🦙) is not in the Llama vocabulary: it is four <0xXX> byte tokens.
  const std::vector<int32_t> ids = tok->encode("a 🦙", false);
  REQUIRE(ids.size() >= 5);
  sampan::tok::StreamDecoder sd(*tok);
  CHECK(sd.push(ids[0]) == "a");  // the first token's "▁" is dropped, as decode does
  std::string mid;
  for (size_t i = 1; i + 1 < ids.size(); ++i) mid += sd.push(ids[i]);
  CHECK(mid == " ");  // the space token and three of the four bytes: nothing of the emoji yet
  CHECK(sd.push(ids.back()) == "🦙");
  CHECK(sd.flush().empty());
}

TEST_CASE("WordPiece decode joins continuations and cleans punctuation", "[tokenizer]") {
  if (!have_fixtures()) return;
  auto tok = sampan::tok::load_tokenizer((kFixtures / "ggml-vocab-bert-bge.gguf").string());
  const std::vector<int32_t> ids = tok->encode("Hello, World! Tokenization", true);
  REQUIRE(ids.size() >= 4);
  CHECK(ids.front() == *tok->special().cls);
  CHECK(ids.back() == *tok->special().sep);
  CHECK(tok->decode(ids, true) == "hello, world! tokenization");
}

TEST_CASE("every tokenizer.ggml.pre type builds a pipeline whose regexes compile", "[tokenizer]") {
  const std::vector<std::string> names = sampan::tok::gguf_pre_tokenizer_names();
  CHECK(names.size() >= 90);
  for (const std::string& name : names) {
    INFO("tokenizer.ggml.pre '" << name << "'");
    auto p = sampan::tok::gguf_pre_tokenizer(name);
    REQUIRE(p.has_value());
    sampan::tok::TokenizerSpec spec;
    CHECK_NOTHROW(sampan::tok::parse_pipeline_json({{"pre_tokenizer", p->pre_tokenizer}}, "test", spec));
    CHECK(!spec.pre_tokenizers.empty());
  }
  CHECK_FALSE(sampan::tok::gguf_pre_tokenizer("no-such-pre").has_value());
}

TEST_CASE("Split keeps empty matches as cut points, found as Python's regex finds them", "[tokenizer]") {
  // SuperBPE's digit grouping matches only empty strings: 1234567 -> 1 | 234 | 567.
  const sampan::tok::Regex groups(R"((?=(\d{3})+(?!\d)))", "test");
  const auto m = groups.find_all("1234567", /*keep_empty=*/true);
  REQUIRE(m.size() == 2);
  CHECK(m[0] == std::pair<size_t, size_t>{1, 1});
  CHECK(m[1] == std::pair<size_t, size_t>{4, 4});
  CHECK(groups.find_all("1234567").empty());
  // After an empty match a non-empty one may start at the same place (Python: ^|\w+ on "foo").
  const sampan::tok::Regex alt(R"(^|\w+)", "test");
  const auto a = alt.find_all("foo", true);
  REQUIRE(a.size() == 2);
  CHECK(a[0] == std::pair<size_t, size_t>{0, 0});
  CHECK(a[1] == std::pair<size_t, size_t>{0, 3});
}
