// SafetensorsFile and MappedFile: valid files (every dtype, metadata, padding, zero-copy views
// that outlive the file object) and every malformed-header case, each asserting the error code
// and that the one-line message names the file and the tensor.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/mapped_file.h"
#include "engine/loaders/json_util.h"
#include "engine/loaders/safetensors.h"
#include "tests/unit/loader_test_util.h"

using namespace sampan;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace sampan::test;

namespace {

// A header entry written by hand for the malformed cases.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape +
         ", \"data_offsets\": " + offsets + "}";
}

}  // namespace

TEST_CASE("MappedFile maps a file read-only and reports OS errors with the path") {
  TempDir dir("st");
  const std::string path = dir.file("blob.bin");
  const auto bytes = pattern(5125, 7);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  const auto f = MappedFile::open(path);
  REQUIRE(f->size() == bytes.size());
  CHECK(std::memcmp(f->data(), bytes.data(), bytes.size()) == 0);
  CHECK(f->path() == path);
  CHECK(f->contains(f->data() + 100, 5025));
  CHECK_FALSE(f->contains(f->data() + 100, 5026));
  CHECK_FALSE(f->contains(bytes.data(), 1));
  f->prefetch(4000, 1u << 20);  // past the end: clamped, must not fault

  const std::string empty = dir.file("empty.bin");
  std::ofstream(empty).close();
  const auto e = MappedFile::open(empty);
  CHECK(e->size() == 0);
  CHECK(e->data() == nullptr);

  expect_error([&] { MappedFile::open(dir.file("nope.bin")); }, ErrorCode::kNotFound,
               {dir.file("nope.bin"), "No such file"});
  expect_error([&] { MappedFile::open(dir.path.string()); }, ErrorCode::kIo,
               {dir.path.string(), "not a regular file"});
}

TEST_CASE("safetensors: every dtype round-trips, zero-copy, in file order") {
  TempDir dir("st");
  const std::string path = dir.file("model.safetensors");
  // Laid out so that every non-empty tensor starts aligned to its element size (the writer
  // pads the header to 8 bytes); names in data order are deliberately not alphabetical.
  const std::vector<Spec> specs = {
      spec("a.bias", "I64", {}, 2),        spec("b.weight", "F32", {7, 3}, 1),
      spec("ids", "I32", {1, 1, 1}, 6),    spec("emb", "BF16", {17, 2}, 3),
      spec("half", "F16", {1, 33}, 4),     spec("empty", "F32", {0, 5}, 5),
      spec("q8", "I8", {769}, 7),          spec("fp8", "F8_E4M3", {3}, 8),
  };
  write_safetensors(path, specs, json{{"format", "pt"}, {"note", "ünïcödé"}});

  const SafetensorsFile f = SafetensorsFile::open(path);
  CHECK(f.path() == path);
  CHECK(f.size() == specs.size());
  std::vector<std::string> expected_order;
  for (const auto& s : specs) expected_order.push_back(s.name);
  CHECK(f.names() == expected_order);  // data order, not alphabetical
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.metadata().at("note") == "ünïcödé");
  CHECK(f.data_offset() % 8 == 0);

  uint64_t offset = 0;
  for (const Spec& s : specs) {
    INFO(s.name);
    const SafetensorsTensorInfo& info = f.info(s.name);
    CHECK(info.name == s.name);
    CHECK(std::string(dtype_safetensors_name(info.dtype)) == s.dtype);
    CHECK(info.shape == s.shape);
    CHECK(info.data_begin == offset);
    CHECK(info.nbytes() == s.bytes.size());
    offset += s.bytes.size();

    const Tensor t = f.get(s.name);
    CHECK(t.shape() == s.shape);
    CHECK(t.dtype() == info.dtype);
    CHECK(t.device() == Device::cpu());
    REQUIRE(static_cast<size_t>(t.nbytes()) == s.bytes.size());
    if (!s.bytes.empty()) {
      CHECK(std::memcmp(t.raw(), s.bytes.data(), s.bytes.size()) == 0);
      // Zero-copy: the tensor's bytes are the mapped file's bytes.
      CHECK(f.mapping().contains(t.raw(), s.bytes.size()));
      CHECK(static_cast<const uint8_t*>(t.raw()) ==
            f.mapping().data() + f.data_offset() + info.data_begin);
      CHECK(reinterpret_cast<uintptr_t>(t.raw()) % element_size(s.dtype) == 0);
    }
  }
  CHECK(f.has("emb"));
  CHECK_FALSE(f.has("nope"));
  expect_error([&] { f.info("nope"); }, ErrorCode::kNotFound, {path, "tensor 'nope' is missing"});
  expect_error([&] { f.get("nope"); }, ErrorCode::kNotFound, {path, "'nope'"});
}

TEST_CASE("safetensors: tensors keep the mapping alive after the file object is gone") {
  TempDir dir("st");
  const std::string path = dir.file("w.safetensors");
  const Spec s = spec("w", "F32", {5, 7}, 9);
  write_safetensors(path, {s});
  Tensor t;
  const void* mapped = nullptr;
  {
    const SafetensorsFile f = SafetensorsFile::open(path);
    t = f.get("w");
    mapped = f.mapping().data();
  }
  // Under ASan a use of unmapped memory would fault here; the Storage's keepalive prevents it.
  CHECK(static_cast<const uint8_t*>(t.raw()) > static_cast<const uint8_t*>(mapped));
  CHECK(std::memcmp(t.raw(), s.bytes.data(), s.bytes.size()) == 0);
  const Tensor f32 = t.to_f32();
  float first;
  std::memcpy(&first, s.bytes.data(), 4);
  CHECK(f32.data<float>()[0] == first);
}

TEST_CASE("safetensors: empty file and padding variants") {
  TempDir dir("st");
  SECTION("no tensors, header '{}' only") {
    const std::string path = dir.file("none.safetensors");
    write_header_and_data(path, "{}", {});
    const SafetensorsFile f = SafetensorsFile::open(path);
    CHECK(f.size() == 0);
    CHECK(f.metadata().empty());
    CHECK(f.data_size() == 0);
  }
  SECTION("metadata only") {
    const std::string path = dir.file("meta.safetensors");
    write_header_and_data(path, R"({"__metadata__": {"k": "v"}}   )", {});
    const SafetensorsFile f = SafetensorsFile::open(path);
    CHECK(f.size() == 0);
    CHECK(f.metadata().at("k") == "v");
  }
  SECTION("unpadded header: misaligned tensors are copied, aligned ones are not") {
    const std::string path = dir.file("odd.safetensors");
    // Two i8 bytes first push the following f32 off 4-byte alignment whatever the header size;
    // the header is left unpadded.
    const Spec a = spec("a", "I8", {2}, 1);
    const Spec b = spec("b", "F32", {17}, 2);
    write_safetensors(path, {a, b}, std::nullopt, 1);
    const SafetensorsFile f = SafetensorsFile::open(path);
    const Tensor tb = f.get("b");
    CHECK(reinterpret_cast<uintptr_t>(tb.raw()) % 4 == 0);
    CHECK(std::memcmp(tb.raw(), b.bytes.data(), b.bytes.size()) == 0);
    const uint8_t* in_file = f.mapping().data() + f.data_offset() + f.info("b").data_begin;
    if (reinterpret_cast<uintptr_t>(in_file) % 4 != 0) {
      CHECK_FALSE(f.mapping().contains(tb.raw()));
    } else {
      CHECK(tb.raw() == in_file);
    }
    // i8 never needs alignment: always a view.
    CHECK(f.mapping().contains(f.get("a").raw(), 2));
  }
}

TEST_CASE("safetensors: file-level errors name the file") {
  TempDir dir("st");
  const std::string path = dir.file("bad.safetensors");

  SECTION("missing file") {
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kNotFound, {path});
  }
  SECTION("empty file") {
    write_header_and_data(path, "", {});
    // write_raw wrote the 8-byte length 0 only; truncate to 0 bytes.
    fs::resize_file(path, 0);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "too small"});
  }
  SECTION("truncated inside the length field") {
    {
      std::ofstream out(path, std::ios::binary);
      out.write("\x10\x00\x00", 3);
    }
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "3 bytes"});
  }
  SECTION("header length runs past the file") {
    write_raw(path, 1000, "{}", {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "header length 1000", "past the end"});
  }
  SECTION("header length beyond the 100 MB limit") {
    write_raw(path, uint64_t(1) << 40, "{}", {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, std::to_string(uint64_t(1) << 40), "limit"});
  }
  SECTION("truncated data section") {
    const Spec s = spec("model.layers.0.mlp.up_proj.weight", "BF16", {8, 8}, 1);
    write_safetensors(path, {s});
    fs::resize_file(path, fs::file_size(path) - 3);
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "'model.layers.0.mlp.up_proj.weight'", "run past the data section"});
  }
  SECTION("not JSON") {
    write_header_and_data(path, "{\"a\": \n", {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "not valid JSON"});
  }
  SECTION("trailing garbage after the object") {
    write_header_and_data(path, "{} x", {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "not valid JSON"});
  }
  SECTION("not an object") {
    write_header_and_data(path, "[1, 2]  ", {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "does not start with '{'"});
  }
  SECTION("invalid UTF-8 in a string") {
    write_header_and_data(path, "{\"__metadata__\": {\"k\": \"\xff\xfe\"}}", {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "not valid JSON"});
  }
  SECTION("deeply nested header") {
    std::string h = "{\"__metadata__\": ";
    for (int i = 0; i < 1000; ++i) h += "[";
    for (int i = 0; i < 1000; ++i) h += "]";
    h += "}";
    write_header_and_data(path, h, {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "nests deeper"});
  }
  SECTION("metadata not a string map") {
    write_header_and_data(path, R"({"__metadata__": {"format": "pt", "n": 3}})", {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "'__metadata__'", "'n'", "expected a string"});
    write_header_and_data(path, R"({"__metadata__": [1]})", {});
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "'__metadata__'"});
  }
  SECTION("bytes nobody indexes at the end") {
    write_header_and_data(path, "{" + entry("w", "I8", "[4]", "[0, 4]") + "}",
                          std::vector<uint8_t>(6, 0));
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 {path, "[4, 6)", "not indexed"});
  }
}

TEST_CASE("safetensors: tensor-level errors name the file and the tensor") {
  TempDir dir("st");
  const std::string path = dir.file("model.safetensors");
  const std::string up = "model.layers.0.mlp.up_proj.weight";
  auto open_with = [&](const std::string& entries, size_t data_bytes) {
    write_header_and_data(path, "{" + entries + "}", std::vector<uint8_t>(data_bytes, 0));
    return [&] { SafetensorsFile::open(path); };
  };
  const std::vector<std::string> names_it = {path, "tensor '" + up + "'"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), names_it.begin(), names_it.end());
    return extra;
  };

  SECTION("size mismatch, the message spelled out") {
    const std::string msg = expect_error(open_with(entry(up, "BF16", "[8, 8]", "[0, 100]"), 100),
                                         ErrorCode::kInvalidModel, names_it);
    CHECK(msg == path + ": tensor '" + up +
                     "': data_offsets [0, 100] hold 100 bytes but bf16[8, 8] needs 128");
  }
  SECTION("unknown dtype is unsupported, naming the dtype") {
    expect_error(open_with(entry(up, "F64", "[2]", "[0, 16]"), 16), ErrorCode::kUnsupported,
                 with({"'F64'"}));
    expect_error(open_with(entry(up, "BOOL", "[2]", "[0, 2]"), 2), ErrorCode::kUnsupported,
                 with({"'BOOL'"}));
  }
  SECTION("dtype not a string") {
    const std::string e =
        "\"" + up + "\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}";
    expect_error(open_with(e, 4),
                 ErrorCode::kInvalidModel, with({"dtype is an integer"}));
  }
  SECTION("negative, fractional or non-array shape") {
    expect_error(open_with(entry(up, "F32", "[-1, 4]", "[0, 0]"), 0), ErrorCode::kInvalidModel,
                 with({"[-1,4]", "non-negative"}));
    expect_error(open_with(entry(up, "F32", "[2.5]", "[0, 10]"), 10), ErrorCode::kInvalidModel,
                 with({"non-negative integers"}));
    expect_error(open_with(entry(up, "F32", "4", "[0, 16]"), 16), ErrorCode::kInvalidModel,
                 with({"shape"}));
  }
  SECTION("shape whose byte count overflows 64 bits") {
    expect_error(open_with(entry(up, "F32", "[4611686018427387904, 4]", "[0, 0]"), 0),
                 ErrorCode::kInvalidModel, with({"64 bits"}));
    // numel fits, numel * 4 bytes does not
    expect_error(open_with(entry(up, "F32", "[4611686018427387904]", "[0, 0]"), 0),
                 ErrorCode::kInvalidModel, with({"64 bits"}));
  }
  SECTION("offsets out of range, reversed, malformed") {
    expect_error(open_with(entry(up, "I8", "[8]", "[0, 8]"), 4), ErrorCode::kInvalidModel,
                 with({"[0, 8]", "run past the data section (4 bytes)"}));
    expect_error(open_with(entry(up, "I8", "[0]", "[8, 4]"), 8), ErrorCode::kInvalidModel,
                 with({"[8, 4]", "end before they begin"}));
    expect_error(open_with(entry(up, "I8", "[4]", "[-4, 0]"), 4), ErrorCode::kInvalidModel,
                 with({"data_offsets"}));
    expect_error(open_with(entry(up, "I8", "[4]", "[0, 4, 8]"), 4), ErrorCode::kInvalidModel,
                 with({"data_offsets"}));
    expect_error(open_with(entry(up, "I8", "[4]", "[0]"), 4), ErrorCode::kInvalidModel,
                 with({"data_offsets"}));
  }
  SECTION("missing and unknown keys") {
    write_header_and_data(path, "{\"" + up + "\": {\"dtype\": \"F32\", \"shape\": [1]}}",
                          std::vector<uint8_t>(4, 0));
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 with({"missing 'data_offsets'"}));
    write_header_and_data(path,
                          "{\"" + up + "\": {\"shape\": [1], \"data_offsets\": [0, 4]}}",
                          std::vector<uint8_t>(4, 0));
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 with({"missing 'dtype'"}));
    write_header_and_data(path,
                          "{\"" + up + "\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}",
                          std::vector<uint8_t>(4, 0));
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 with({"missing 'shape'"}));
    write_header_and_data(path,
                          "{\"" + up +
                              "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], "
                              "\"extra\": 1}}",
                          std::vector<uint8_t>(4, 0));
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidModel,
                 with({"unknown key 'extra'"}));
    expect_error(open_with("\"" + up + "\": [1, 2]", 0), ErrorCode::kInvalidModel,
                 with({"expected an object"}));
  }
  SECTION("overlapping offsets name both tensors") {
    expect_error(open_with(entry("first", "I8", "[8]", "[0, 8]") + ", " +
                               entry(up, "I8", "[8]", "[4, 12]"),
                           12),
                 ErrorCode::kInvalidModel, with({"overlap", "'first'", "[4, 12]"}));
    // Same bytes claimed twice.
    expect_error(open_with(entry("first", "I8", "[8]", "[0, 8]") + ", " +
                               entry(up, "I8", "[8]", "[0, 8]"),
                           8),
                 ErrorCode::kInvalidModel, {path, "overlap", "'first'", "'" + up + "'"});
  }
  SECTION("a hole between tensors") {
    expect_error(open_with(entry("first", "I8", "[8]", "[0, 8]") + ", " +
                               entry(up, "I8", "[4]", "[12, 16]"),
                           16),
                 ErrorCode::kInvalidModel, with({"[8, 12)", "hole"}));
    // A hole at the very start.
    expect_error(open_with(entry(up, "I8", "[4]", "[4, 8]"), 8), ErrorCode::kInvalidModel,
                 with({"[0, 4)", "hole"}));
  }
  SECTION("duplicate tensor names") {
    expect_error(open_with(entry(up, "I8", "[4]", "[0, 4]") + ", " +
                               entry(up, "I8", "[4]", "[4, 8]"),
                           8),
                 ErrorCode::kInvalidModel, {path, "duplicate key '" + up + "'"});
  }
  SECTION("names with control characters stay on one line") {
    write_header_and_data(path, "{" + entry("bad\\nname", "F64", "[1]", "[0, 8]") + "}",
                          std::vector<uint8_t>(8, 0));
    expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kUnsupported,
                 {path, "bad\\x0aname"});
  }
}

TEST_CASE("printable escapes control bytes and invalid UTF-8, keeps valid UTF-8") {
  CHECK(printable("plain.name") == "plain.name");
  CHECK(printable("a\nb\tc") == "a\\x0ab\\x09c");
  CHECK(printable("\xc3\xa9t\xc3\xa9") == "\xc3\xa9t\xc3\xa9");  // "été"
  CHECK(printable("\xff") == "\\xff");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");      // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // UTF-16 surrogate
  CHECK(printable(std::string(500, 'x'), 10) == std::string(10, 'x') + "...");
}
