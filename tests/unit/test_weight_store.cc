// WeightStore: single-file, indexed-sharded and unindexed multi-file model directories, the
// typed get_as() checks, and every inconsistent-directory case, asserting the one-line message
// names the directory or file and the tensor.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/loaders/weight_store.h"
#include "tests/unit/loader_test_util.h"

using namespace sampan;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace sampan::test;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  REQUIRE(out.good());
}

void check_bytes(const Tensor& t, const Spec& s) {
  INFO(s.name);
  CHECK(t.shape() == s.shape);
  REQUIRE(static_cast<size_t>(t.nbytes()) == s.bytes.size());
  CHECK(std::memcmp(t.raw(), s.bytes.data(), s.bytes.size()) == 0);
}

// A two-layer toy model split across two shards.
struct ShardedModel {
  std::vector<Spec> shard1 = {spec("model.embed_tokens.weight", "BF16", {17, 8}, 1),
                              spec("model.layers.0.self_attn.q_proj.weight", "BF16", {8, 8}, 2),
                              spec("model.layers.0.input_layernorm.weight", "F32", {8}, 3)};
  std::vector<Spec> shard2 = {spec("model.layers.1.self_attn.q_proj.weight", "F16", {8, 8}, 4),
                              spec("model.norm.weight", "F32", {8}, 5),
                              spec("lm_head.weight", "BF16", {17, 8}, 6)};
  const char* name1 = "model-00001-of-00002.safetensors";
  const char* name2 = "model-00002-of-00002.safetensors";

  json index() const {
    json wm = json::object();
    for (const auto& s : shard1) wm[s.name] = name1;
    for (const auto& s : shard2) wm[s.name] = name2;
    return {{"metadata", {{"total_size", 1234}}}, {"weight_map", wm}};
  }
  void write(const TempDir& dir) const {
    write_safetensors(dir.file(name1), shard1);
    write_safetensors(dir.file(name2), shard2);
    write_text(dir.file("model.safetensors.index.json"), index().dump(2));
  }
};

}  // namespace

TEST_CASE("WeightStore: single model.safetensors") {
  TempDir dir("ws");
  const std::vector<Spec> specs = {spec("w.a", "F32", {7, 3}, 1), spec("w.b", "BF16", {5}, 2),
                                   spec("w.c", "I8", {33}, 3), spec("w.d", "BF16", {1, 3}, 4)};
  write_safetensors(dir.file("model.safetensors"), specs);
  // Mistral repos ship a consolidated.safetensors beside the HF files; it must be ignored.
  write_safetensors(dir.file("consolidated.safetensors"), {spec("w.a", "F32", {2}, 9)});

  const WeightStore store = WeightStore::open(dir.str());
  CHECK(store.dir() == dir.str());
  CHECK(store.files() == std::vector<std::string>{dir.file("model.safetensors")});
  CHECK(store.size() == 4);
  CHECK(store.names() == std::vector<std::string>{"w.a", "w.b", "w.c", "w.d"});
  CHECK(store.has("w.c"));
  CHECK_FALSE(store.has("w.z"));
  for (const auto& s : specs) check_bytes(store.get(s.name), s);

  const WeightInfo info = store.info("w.b");
  CHECK(info.name == "w.b");
  CHECK(info.file == dir.file("model.safetensors"));
  CHECK(info.dtype == DType::kBF16);
  CHECK(info.shape == Shape{5});
  CHECK(info.nbytes == 10);

  CHECK(store.parameter_count() == 21 + 5 + 33 + 3);
  CHECK(store.total_bytes() == 84 + 10 + 33 + 6);
  const auto by_dtype = store.bytes_by_dtype();
  CHECK(by_dtype.size() == 3);
  CHECK(by_dtype.at(DType::kF32) == 84);
  CHECK(by_dtype.at(DType::kBF16) == 16);
  CHECK(by_dtype.at(DType::kI8) == 33);
  CHECK(store.index_metadata() == "{}");

  expect_error([&] { store.get("w.z"); }, ErrorCode::kNotFound,
               {dir.str() + ": tensor 'w.z' is missing"});
  expect_error([&] { store.info("w.z"); }, ErrorCode::kNotFound, {dir.str(), "'w.z'"});
}

TEST_CASE("WeightStore: a safetensors file given directly") {
  TempDir dir("ws");
  const Spec s = spec("x", "F32", {4}, 1);
  write_safetensors(dir.file("only.safetensors"), {s});
  const WeightStore store = WeightStore::open(dir.file("only.safetensors"));
  check_bytes(store.get("x"), s);
}

TEST_CASE("WeightStore: sharded checkpoint with an index") {
  TempDir dir("ws");
  const ShardedModel m;
  m.write(dir);
  // A stray shard that the index does not reference is never opened (its tensor names clash).
  write_safetensors(dir.file("consolidated.safetensors"), m.shard1);

  Tensor kept;
  {
    const WeightStore store = WeightStore::open(dir.str());
    CHECK(store.files() == std::vector<std::string>{dir.file(m.name1), dir.file(m.name2)});
    CHECK(store.size() == 6);
    for (const auto& s : m.shard1) {
      check_bytes(store.get(s.name), s);
      CHECK(store.info(s.name).file == dir.file(m.name1));
    }
    for (const auto& s : m.shard2) {
      check_bytes(store.get(s.name), s);
      CHECK(store.info(s.name).file == dir.file(m.name2));
    }
    CHECK(store.parameter_count() == 136 + 64 + 8 + 64 + 8 + 136);
    CHECK(store.bytes_by_dtype().at(DType::kF16) == 128);
    CHECK(json::parse(store.index_metadata()) == json{{"total_size", 1234}});
    kept = store.get("lm_head.weight");
  }
  // The tensor keeps its shard mapped after the store is gone.
  check_bytes(kept, m.shard2[2]);
}

TEST_CASE("WeightStore: several safetensors files without an index") {
  TempDir dir("ws");
  const std::vector<Spec> a = {spec("a.0", "F32", {3}, 1), spec("a.1", "I32", {2, 2}, 2)};
  const std::vector<Spec> b = {spec("b.0", "BF16", {5, 1}, 3)};
  write_safetensors(dir.file("part-b.safetensors"), b);
  write_safetensors(dir.file("part-a.safetensors"), a);
  write_text(dir.file("config.json"), "{}");  // other files are ignored

  const WeightStore store = WeightStore::open(dir.str());
  CHECK(store.files() ==
        std::vector<std::string>{dir.file("part-a.safetensors"), dir.file("part-b.safetensors")});
  CHECK(store.names() == std::vector<std::string>{"a.0", "a.1", "b.0"});
  check_bytes(store.get("a.1"), a[1]);
  check_bytes(store.get("b.0"), b[0]);
  CHECK(store.info("b.0").file == dir.file("part-b.safetensors"));

  SECTION("a tensor in two files is an error naming both") {
    write_safetensors(dir.file("part-c.safetensors"), {spec("a.1", "I32", {2, 2}, 7)});
    expect_error([&] { WeightStore::open(dir.str()); }, ErrorCode::kInvalidModel,
                 {dir.file("part-c.safetensors"), "tensor 'a.1'", dir.file("part-a.safetensors")});
  }
}

TEST_CASE("WeightStore::get_as checks shape and dtype") {
  TempDir dir("ws");
  write_safetensors(dir.file("model.safetensors"),
                    {spec("x", "BF16", {4, 8}, 1), spec("v", "F32", {8}, 2)});
  const WeightStore store = WeightStore::open(dir.str());
  const std::string file = dir.file("model.safetensors");

  CHECK(store.get_as("x", {4, 8}).shape() == Shape{4, 8});
  CHECK(store.get_as("x", {4, 8}, {DType::kBF16, DType::kF16}).dtype() == DType::kBF16);
  CHECK(store.get_as("x", {-1, 8}, {DType::kBF16}).shape() == Shape{4, 8});  // -1: any size
  CHECK(store.get_as("v", {8}, {DType::kF32}).numel() == 8);

  const std::string msg = expect_error([&] { store.get_as("x", {8, 8}); },
                                       ErrorCode::kInvalidModel, {file, "'x'"});
  CHECK(msg == file + ": tensor 'x' has shape [4, 8], expected [8, 8]");
  expect_error([&] { store.get_as("x", {4, 8, 1}); }, ErrorCode::kInvalidModel,
               {file, "tensor 'x' has shape [4, 8], expected [4, 8, 1]"});
  expect_error([&] { store.get_as("v", {}); }, ErrorCode::kInvalidModel,
               {file, "tensor 'v' has shape [8], expected []"});
  expect_error([&] { store.get_as("x", {4, 8}, {DType::kF32}); }, ErrorCode::kInvalidModel,
               {file, "tensor 'x' has dtype bf16, expected f32"});
  expect_error([&] { store.get_as("v", {8}, {DType::kBF16, DType::kF16}); },
               ErrorCode::kInvalidModel,
               {file, "tensor 'v' has dtype f32, expected one of bf16, f16"});
  expect_error([&] { store.get_as("nope", {8}); }, ErrorCode::kNotFound,
               {dir.str() + ": tensor 'nope' is missing"});
}

TEST_CASE("WeightStore: directory errors") {
  TempDir dir("ws");
  SECTION("missing directory") {
    expect_error([&] { WeightStore::open(dir.file("absent")); }, ErrorCode::kNotFound,
                 {dir.file("absent"), "does not exist"});
  }
  SECTION("no safetensors file at all") {
    write_text(dir.file("config.json"), "{}");
    expect_error([&] { WeightStore::open(dir.str()); }, ErrorCode::kNotFound,
                 {dir.str(), "model.safetensors"});
  }
  SECTION("a corrupt shard names the shard") {
    write_text(dir.file("model.safetensors"), "garbage!garbage!");
    expect_error([&] { WeightStore::open(dir.str()); }, ErrorCode::kInvalidModel,
                 {dir.file("model.safetensors")});
  }
}

TEST_CASE("WeightStore: index errors name the index, shard and tensor") {
  TempDir dir("ws");
  const ShardedModel m;
  m.write(dir);
  const std::string index_path = dir.file("model.safetensors.index.json");
  auto open = [&] { WeightStore::open(dir.str()); };

  SECTION("missing shard") {
    fs::remove(dir.file(m.name2));
    expect_error(open, ErrorCode::kNotFound,
                 {index_path, std::string("shard '") + m.name2 + "'", "does not exist",
                  "tensor 'lm_head.weight'"});
  }
  SECTION("tensor mapped to a shard that does not hold it") {
    json idx = m.index();
    idx["weight_map"]["model.layers.7.mlp.up_proj.weight"] = m.name1;
    write_text(index_path, idx.dump());
    expect_error(open, ErrorCode::kInvalidModel,
                 {index_path, "tensor 'model.layers.7.mlp.up_proj.weight'", m.name1,
                  "does not contain it"});
  }
  SECTION("tensor mapped to one shard but also present in another") {
    json idx = m.index();
    idx["weight_map"]["model.norm.weight"] = m.name1;  // really in shard 2 only
    write_text(index_path, idx.dump());
    expect_error(open, ErrorCode::kInvalidModel, {index_path, "tensor 'model.norm.weight'"});
    // Both shards hold it: rewrite shard 1 with an extra copy.
    auto shard1 = m.shard1;
    shard1.push_back(spec("model.norm.weight", "F32", {8}, 5));
    write_safetensors(dir.file(m.name1), shard1);
    expect_error(open, ErrorCode::kInvalidModel,
                 {dir.file(m.name2), "tensor 'model.norm.weight' is also in", dir.file(m.name1)});
  }
  SECTION("a tensor listed twice in the weight_map") {
    std::string text = m.index().dump();
    const std::string dup = std::string("\"weight_map\":{\"lm_head.weight\":\"") + m.name1 + "\",";
    text.replace(text.find("\"weight_map\":{"), 14, dup);
    write_text(index_path, text);
    expect_error(open, ErrorCode::kInvalidModel,
                 {index_path, "duplicate key 'lm_head.weight'"});
  }
  SECTION("bad JSON") {
    write_text(index_path, "{\"weight_map\": {");
    expect_error(open, ErrorCode::kInvalidModel, {index_path, "not valid JSON"});
  }
  SECTION("weight_map missing, wrong type, empty") {
    write_text(index_path, R"({"metadata": {}})");
    expect_error(open, ErrorCode::kInvalidModel, {index_path, "'weight_map' is missing"});
    write_text(index_path, R"({"weight_map": []})");
    expect_error(open, ErrorCode::kInvalidModel, {index_path, "'weight_map' must be an object"});
    write_text(index_path, R"({"weight_map": {}})");
    expect_error(open, ErrorCode::kInvalidModel, {index_path, "'weight_map' is empty"});
    write_text(index_path, R"([1, 2])");
    expect_error(open, ErrorCode::kInvalidModel, {index_path, "not a JSON object"});
  }
  SECTION("shard name not a string") {
    write_text(index_path, R"({"weight_map": {"w": 3}})");
    expect_error(open, ErrorCode::kInvalidModel, {index_path, "tensor 'w'"});
  }
  SECTION("shard names may not leave the directory") {
    for (const std::string shard : {"../evil.safetensors", "/etc/passwd", "a/../../b", ""}) {
      INFO(shard);
      write_text(index_path, json{{"weight_map", {{"w", shard}}}}.dump());
      expect_error(open, ErrorCode::kInvalidModel, {index_path, "tensor 'w'", "inside the model"});
    }
  }
}
