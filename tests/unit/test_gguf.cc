// GGUF metadata reader: values read back as written by a small writer in this test, and every
// malformed file refused with one line naming the file and the key.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>

#include "engine/loaders/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/unit/loader_test_util.h"

namespace {

using sampan::ErrorCode;
using sampan::gguf::GgufFile;
using sampan::test::expect_error;
using sampan::test::TempDir;

// Builds a GGUF byte stream: little-endian scalars, u64-length strings.
struct Writer {
  std::vector<uint8_t> b;
  template <typename T>
  void put(T v) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &v, sizeof(T));
    b.insert(b.end(), raw, raw + sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
  void header(uint32_t version, uint64_t n_kv) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(version);
    put<uint64_t>(0);  // tensors
    put<uint64_t>(n_kv);
  }
  void kv_str(const std::string& k, const std::string& v) { str(k), put<uint32_t>(8), str(v); }
  void kv_u32(const std::string& k, uint32_t v) { str(k), put<uint32_t>(4), put<uint32_t>(v); }
  void kv_bool(const std::string& k, bool v) { str(k), put<uint32_t>(7), put<uint8_t>(v); }
  void kv_strs(const std::string& k, const std::vector<std::string>& v) {
    str(k), put<uint32_t>(9), put<uint32_t>(8), put<uint64_t>(v.size());
    for (const auto& s : v) str(s);
  }
  void kv_f32s(const std::string& k, const std::vector<float>& v) {
    str(k), put<uint32_t>(9), put<uint32_t>(6), put<uint64_t>(v.size());
    for (float f : v) put<float>(f);
  }
  void kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    str(k), put<uint32_t>(9), put<uint32_t>(5), put<uint64_t>(v.size());
    for (int32_t x : v) put<int32_t>(x);
  }
  void save(const std::string& path, size_t cut = 0) const {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size() - cut));
  }
};

// A 7-token SentencePiece vocabulary: "▁a", "▁ab" merge by score.
Writer spm_vocab(int32_t bos_id) {
  Writer w;
  w.header(3, 7);
  w.kv_str("tokenizer.ggml.model", "llama");
  w.kv_strs("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a"});
  w.kv_f32s("tokenizer.ggml.scores", {0, 0, 0, -3, -1, -2, -0.5f});
  w.kv_i32s("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1});
  w.kv_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos_id));
  w.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  w.kv_bool("tokenizer.ggml.add_bos_token", true);
  return w;
}

}  // namespace

TEST_CASE("GGUF values read back as written", "[gguf]") {
  TempDir dir("gguf");
  Writer w;
  w.header(3, 4);
  w.kv_str("general.name", "tiny");
  w.kv_u32("n", 17);
  w.kv_bool("flag", true);
  w.kv_strs("list", {"x", "", "yz"});
  w.save(dir.file("a.gguf"));
  auto g = GgufFile::open(dir.file("a.gguf"));
  CHECK(g->version() == 3);
  CHECK(g->get_string("general.name") == "tiny");
  CHECK(g->get_int("n") == 17);
  CHECK(g->get_bool("flag") == true);
  CHECK(*g->get_string_array("list") == std::vector<std::string>{"x", "", "yz"});
  CHECK(!g->get_string("absent").has_value());
  expect_error([&] { g->get_string("n"); }, ErrorCode::kInvalidModel, {"a.gguf", "'n'", "uint32"});
}

TEST_CASE("malformed GGUF files are refused naming file and key", "[gguf]") {
  TempDir dir("gguf_bad");
  Writer w;
  w.header(3, 2);
  w.kv_str("first", "value");
  w.kv_strs("tokenizer.ggml.tokens", {"aa", "bb", "cc"});
  // truncated inside the string array of the second key
  w.save(dir.file("cut.gguf"), 3);
  expect_error([&] { GgufFile::open(dir.file("cut.gguf")); }, ErrorCode::kInvalidModel,
               {"cut.gguf", "truncated", "tokenizer.ggml.tokens"});
  // every shorter prefix fails cleanly too (no crash, one line)
  for (size_t cut = 1; cut < w.b.size(); cut += 7) {
    w.save(dir.file("p.gguf"), cut);
    CHECK_THROWS_AS(GgufFile::open(dir.file("p.gguf")), sampan::Error);
  }
  Writer v1;
  v1.header(1, 0);
  v1.save(dir.file("v1.gguf"));
  expect_error([&] { GgufFile::open(dir.file("v1.gguf")); }, ErrorCode::kUnsupported, {"v1.gguf", "version 1"});
  Writer magic;
  magic.b = {'G', 'G', 'M', 'L', 0, 0, 0, 0};
  magic.save(dir.file("m.gguf"));
  expect_error([&] { GgufFile::open(dir.file("m.gguf")); }, ErrorCode::kInvalidModel, {"m.gguf", "magic"});
}

TEST_CASE("GGUF SentencePiece vocabulary: score merges, byte-less unknowns, BOS", "[gguf][tokenizer]") {
  TempDir dir("gguf_spm");
  spm_vocab(1).save(dir.file("spm.gguf"));
  auto tok = sampan::tok::load_tokenizer(dir.file("spm.gguf"));
  // " ab" -> "▁ab": "▁a" (score -0.5) wins over "ab" (absent); then "▁a" + "b"
  CHECK(tok->encode("ab", false) == std::vector<int32_t>{6, 5});
  CHECK(tok->encode("ab", true) == std::vector<int32_t>{1, 6, 5});
  // 'c' is unknown and there are no <0xXX> tokens: <unk>
  CHECK(tok->encode("c", false) == std::vector<int32_t>{3, 0});
  CHECK(tok->decode(std::vector<int32_t>{6, 5}) == "ab");

  spm_vocab(99).save(dir.file("range.gguf"));
  expect_error([&] { sampan::tok::load_tokenizer(dir.file("range.gguf")); }, ErrorCode::kInvalidModel,
               {"range.gguf", "tokenizer.ggml.bos_token_id", "99"});
}
