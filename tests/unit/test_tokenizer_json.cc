// tokenizer.json loading on small hand-written tokenizers (expected ids worked out by hand from
// the merge ranks), and the one-line errors for malformed files.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "tests/unit/loader_test_util.h"

namespace {

using json = nlohmann::json;
using sampan::ErrorCode;
using sampan::test::expect_error;
using sampan::test::TempDir;

// Byte-level BPE over "Ġ", "a", "b", "c" with merges a b -> ab (rank 0), Ġ ab -> Ġab (rank 1),
// ab c (rank 2); "<|end|>" is a special added token.
json tiny_bpe() {
  return json{{"model",
               {{"type", "BPE"},
                {"vocab", {{"\xC4\xA0", 0}, {"a", 1}, {"b", 2}, {"c", 3}, {"ab", 4}, {"\xC4\xA0" "ab", 5}, {"abc", 6}}},
                {"merges", json::array({"a b", "\xC4\xA0 ab", "ab c"})}}},
              {"added_tokens", json::array({{{"id", 7}, {"content", "<|end|>"}, {"special", true}}})},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"decoder", {{"type", "ByteLevel"}}}};
}

void save(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST_CASE("tiny byte-level BPE follows merge ranks and splits added tokens", "[tokenizer]") {
  TempDir dir("tok_json");
  save(dir.file("tokenizer.json"), tiny_bpe().dump());
  auto tok = sampan::tok::load_tokenizer(dir.file("tokenizer.json"));
  CHECK(tok->kind() == sampan::tok::TokenizerKind::kByteLevelBpe);
  // words "abc", " ab", " c" (GPT-2 regex); "abc": a b -> ab, then ab c -> abc
  CHECK(tok->encode("abc ab c", false) == std::vector<int32_t>{6, 5, 0, 3});
  CHECK(tok->encode("ab<|end|>ab", false) == std::vector<int32_t>{4, 7, 4});
  CHECK(tok->decode(std::vector<int32_t>{6, 5, 0, 3}) == "abc ab c");
  CHECK(tok->decode(std::vector<int32_t>{4, 7, 4}, true) == "abab");
  CHECK(tok->is_special(7));
  CHECK(tok->encode("", true).empty());
}

TEST_CASE("malformed tokenizer.json files are refused with one line naming file and construct", "[tokenizer]") {
  TempDir dir("tok_bad");
  const std::string p = dir.file("tokenizer.json");
  save(p, "{\"model\": ");
  expect_error([&] { sampan::tok::load_tokenizer(p); }, ErrorCode::kInvalidModel, {"tokenizer.json", "JSON"});
  save(p, "{\"version\": \"1.0\"}");
  expect_error([&] { sampan::tok::load_tokenizer(p); }, ErrorCode::kInvalidModel, {"tokenizer.json", "model"});
  json j = tiny_bpe();
  j["model"]["type"] = "Unigram";
  save(p, j.dump());
  expect_error([&] { sampan::tok::load_tokenizer(p); }, ErrorCode::kUnsupported, {"tokenizer.json", "Unigram"});
  j = tiny_bpe();
  j["model"]["merges"].push_back("a zz");
  save(p, j.dump());
  expect_error([&] { sampan::tok::load_tokenizer(p); }, ErrorCode::kInvalidModel,
               {"tokenizer.json", "model.merges[3]", "zz"});
  j = tiny_bpe();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "[z-a]"}}}, {"behavior", "Isolated"}};
  save(p, j.dump());
  expect_error([&] { sampan::tok::load_tokenizer(p); }, ErrorCode::kUnsupported, {"tokenizer.json", "pre_tokenizer"});
  expect_error([&] { sampan::tok::load_tokenizer(dir.file("none.json")); }, ErrorCode::kNotFound, {"none.json"});
}

TEST_CASE("a model directory reads tokenizer_config.json and chat_template.jinja", "[tokenizer]") {
  TempDir dir("tok_dir");
  json j = tiny_bpe();
  j["added_tokens"].push_back({{"id", 8}, {"content", "<s>"}, {"special", true}});
  save(dir.file("tokenizer.json"), j.dump());
  save(dir.file("tokenizer_config.json"),
       json{{"bos_token", "<s>"},
            {"eos_token", {{"content", "<|end|>"}}},
            {"add_bos_token", true},
            {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                           {{"name", "default"}, {"template", "D"}}})}}
           .dump());
  auto tok = sampan::tok::load_tokenizer(dir.str());
  CHECK(tok->chat_template() == "D");
  CHECK(tok->special().bos == 8);
  CHECK(tok->special().eos == 7);
  CHECK(tok->bos_text() == "<s>");
  CHECK(tok->eos_text() == "<|end|>");
  // no post-processor in tokenizer.json: add_bos_token decides
  CHECK(tok->encode("ab", true) == std::vector<int32_t>{8, 4});
  save(dir.file("chat_template.jinja"), "J");
  CHECK(sampan::tok::load_tokenizer(dir.str())->chat_template() == "J");
}
