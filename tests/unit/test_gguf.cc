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

namespace {

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;  // GGUF order: innermost first
  uint32_t type = 0;
  uint64_t offset = 0;
};

// A GGUF file with `tensors` in its table and `data_bytes` of data (byte i holds i % 251).
Writer tensor_file(const std::vector<TensorSpec>& tensors, size_t data_bytes,
                   int64_t alignment = -1) {
  Writer w;
  w.header(3, alignment >= 0 ? 2 : 1);
  const uint64_t n = tensors.size();
  std::memcpy(&w.b[8], &n, sizeof(n));
  w.kv_str("general.architecture", "llama");
  if (alignment >= 0) w.kv_u32("general.alignment", static_cast<uint32_t>(alignment));
  for (const TensorSpec& t : tensors) {
    w.str(t.name);
    w.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) w.put<uint64_t>(d);
    w.put<uint32_t>(t.type);
    w.put<uint64_t>(t.offset);
  }
  const size_t align = alignment > 0 ? static_cast<size_t>(alignment) : 32;
  while (w.b.size() % align != 0) w.b.push_back(0);
  for (size_t i = 0; i < data_bytes; ++i) w.b.push_back(static_cast<uint8_t>(i % 251));
  return w;
}

}  // namespace

TEST_CASE("GGUF tensor table: shapes, types, absolute offsets and bytes", "[gguf]") {
  TempDir dir("gguf_tensors");
  // "a": F32 [2, 4] (32 bytes at 0); "b": Q8_0 [3, 64] (3 rows of 2 blocks of 34 bytes, at 32).
  const Writer w = tensor_file({{"a", {4, 2}, 0, 0}, {"b", {64, 3}, 8, 32}}, 32 + 204);
  w.save(dir.file("t.gguf"));
  auto g = GgufFile::open(dir.file("t.gguf"));
  REQUIRE(g->tensors().size() == 2);
  const auto* a = g->find_tensor("a");
  const auto* b = g->find_tensor("b");
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(g->find_tensor("c") == nullptr);
  CHECK(a->type == sampan::GgmlType::kF32);
  CHECK(a->nbytes == 32);
  CHECK(a->rows() == 2);
  CHECK(b->type == sampan::GgmlType::kQ8_0);
  CHECK(b->nbytes == 204);
  CHECK(b->rows() == 3);
  CHECK(b->row_bytes() == 68);
  CHECK(b->str() == "[3, 64] Q8_0");
  // Offsets are absolute: the data section starts at the first multiple of 32 after the table.
  const size_t data_start = w.b.size() - (32 + 204);
  CHECK(a->offset == data_start);
  CHECK(b->offset == data_start + 32);
  CHECK(g->tensor_data(*b)[0] == 32 % 251);
  CHECK(g->tensor_data(*b)[203] == (32 + 203) % 251);
}

TEST_CASE("malformed GGUF tensor tables are refused naming file and tensor", "[gguf]") {
  TempDir dir("gguf_bad_tensors");
  auto refused = [&](const Writer& w, const std::vector<std::string>& needles) {
    w.save(dir.file("bad.gguf"));
    std::vector<std::string> all = {"bad.gguf"};
    all.insert(all.end(), needles.begin(), needles.end());
    expect_error([&] { GgufFile::open(dir.file("bad.gguf")); }, ErrorCode::kInvalidModel, all);
  };
  refused(tensor_file({{"w", {32}, 99, 0}}, 64), {"'w'", "unknown type 99"});
  refused(tensor_file({{"w", {}, 0, 0}}, 64), {"'w'", "0 dimensions"});
  refused(tensor_file({{"w", {1, 1, 1, 1, 1}, 0, 0}}, 64), {"'w'", "5 dimensions"});
  refused(tensor_file({{"w", {4, 0}, 0, 0}}, 64), {"'w'", "dimension 1 = 0"});
  refused(tensor_file({{"w", {1ull << 40, 1ull << 30}, 0, 0}}, 64), {"'w'", "out of range"});
  // One row of 2^62 - 1 .. 2^62 F32 / F16 elements: its bytes do not fit int64 (the fuzzer's
  // find: ggml_row_bytes overflowed, a UBSan report).
  refused(tensor_file({{"w", {(1ull << 62) - 3}, 0, 0}}, 64), {"'w'", "too large"});
  refused(tensor_file({{"w", {1ull << 62}, 1, 0}}, 64), {"'w'", "too large"});
  refused(tensor_file({{"w", {100, 2}, 12, 0}}, 1024), {"'w'", "not a multiple", "Q4_K"});
  refused(tensor_file({{"w", {4}, 0, 4}}, 64), {"'w'", "offset 4", "alignment 32"});
  refused(tensor_file({{"w", {4}, 0, 64}}, 64), {"'w'", "runs past the end"});
  refused(tensor_file({{"w", {32}, 0, 0}}, 100), {"'w'", "runs past the end"});
  refused(tensor_file({{"w", {4}, 0, 0}, {"w", {4}, 0, 32}}, 64), {"'w'", "twice"});
  refused(tensor_file({{"w", {4}, 0, 0}}, 64, 3), {"general.alignment", "power of two"});
  refused(tensor_file({{"w", {4}, 0, 0}}, 64, 0), {"general.alignment", "power of two"});
  // A tensor count the file cannot hold.
  Writer many = tensor_file({{"w", {4}, 0, 0}}, 64);
  const uint64_t n = 1ull << 40;
  std::memcpy(&many.b[8], &n, sizeof(n));
  refused(many, {"tensor count", "implausible"});
  // Every prefix of a good file fails cleanly (one Error, no crash; ASan in the Sanitize build).
  const Writer good = tensor_file({{"a", {4, 2}, 0, 0}, {"b", {64, 3}, 8, 32}}, 32 + 204);
  for (size_t cut = 1; cut < good.b.size(); ++cut) {
    good.save(dir.file("p.gguf"), cut);
    CHECK_THROWS_AS(GgufFile::open(dir.file("p.gguf")), sampan::Error);
  }
}
