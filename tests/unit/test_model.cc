// models::load_model, the builder registry and the typed signature: every architecture of the
// fixtures loads through the registry, the signature describes exactly the graph's inputs and
// outputs (names, dtypes, shapes, roles), the KV pool format agrees with the graph, and the
// failures name the model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/mapped_file.h"
#include "engine/graph/graph.h"
#include "engine/models/model.h"
#include "loader_test_util.h"
#include "smaps_test_util.h"

using namespace sampan;
using models::TensorRole;

namespace {

std::string tiny_model(const std::string& name) {
  return std::string(SAMPAN_SOURCE_DIR) + "/tests/data/models/" + name;
}

}  // namespace

TEST_CASE("every HF decoder architecture is registered", "[model]") {
  const std::vector<std::string> reg = models::registered_model_builders();
  for (const char* a : {"hf/LlamaForCausalLM", "hf/MistralForCausalLM", "hf/Qwen2ForCausalLM"}) {
    CHECK(std::find(reg.begin(), reg.end(), a) != reg.end());
  }
}

TEST_CASE("load_model: the signature describes the graph", "[model]") {
  for (const char* name : {"tiny_llama3", "tiny_mistral", "tiny_qwen2"}) {
    for (KvDtype kv : {KvDtype::kF32, KvDtype::kI4}) {
      INFO(name << " kv " << kv_dtype_name(kv));
      models::LoadOptions o;
      o.build.kv_cache_dtype = kv;
      const std::unique_ptr<models::Model> m = models::load_model(tiny_model(name), o);
      CHECK(m->format == "hf");
      CHECK(m->architecture == model_arch_name(m->config.arch));
      const HfConfig& c = m->config;

      // Inputs: exactly the graph's, with its dtypes and ranks.
      std::map<std::string, const graph::Value*> graph_inputs;
      for (graph::ValueId id : m->graph.inputs()) graph_inputs[m->graph.value(id).name] = &m->graph.value(id);
      REQUIRE(m->signature.inputs.size() == graph_inputs.size());
      CHECK(static_cast<int64_t>(graph_inputs.size()) == 5 + 2 * c.n_layer);
      for (const models::TensorSpec& t : m->signature.inputs) {
        INFO(t.name);
        REQUIRE(graph_inputs.count(t.name) == 1);
        CHECK(graph_inputs[t.name]->dtype == t.dtype);
        CHECK(graph_inputs[t.name]->shape.size() == t.shape.size());
      }
      const models::TensorSpec* ids = m->signature.find_input(TensorRole::kTokenIds);
      REQUIRE(ids != nullptr);
      CHECK(ids->dtype == DType::kI32);
      CHECK(ids->api_name == "input_ids");
      REQUIRE(ids->shape.size() == 1);
      CHECK(ids->shape[0].symbol == "n_tokens");
      for (TensorRole r : {TensorRole::kPositions, TensorRole::kSeqIds, TensorRole::kBlockTables,
                           TensorRole::kLogitRows}) {
        CHECK(m->signature.find_input(r) != nullptr);
      }
      for (int64_t l = 0; l < c.n_layer; ++l) {
        const models::TensorSpec* k = m->signature.find_input(TensorRole::kKCache, l);
        const models::TensorSpec* v = m->signature.find_input(TensorRole::kVCache, l);
        REQUIRE(k != nullptr);
        REQUIRE(v != nullptr);
        CHECK(k->name != v->name);
        // The pool row: kv_dim f32 values, or the quantized format's bytes as i8.
        const int64_t row = kv == KvDtype::kF32 ? c.kv_dim() : kv_row_bytes(kv, c.n_head_kv, c.head_dim);
        CHECK(k->shape[2].size == row);
        CHECK(k->dtype == (kv == KvDtype::kF32 ? DType::kF32 : DType::kI8));
      }
      CHECK(m->signature.find_input(TensorRole::kKCache, c.n_layer) == nullptr);

      // One output, the logits [n_out, vocab].
      REQUIRE(m->signature.outputs.size() == m->graph.outputs().size());
      const models::TensorSpec* logits = m->signature.find_output(TensorRole::kLogits);
      REQUIRE(logits != nullptr);
      CHECK(logits->api_name == "logits");
      CHECK(logits->shape[1].size == c.vocab_size);

      // KV sizing in one place, from the signature.
      CHECK(m->n_kv_layers == c.n_layer);
      CHECK(m->kv_row_bytes() ==
            (kv == KvDtype::kF32 ? 4 * c.kv_dim() : kv_row_bytes(kv, c.n_head_kv, c.head_dim)));
      CHECK(m->kv_block_bytes(16) == 2 * c.n_layer * 16 * m->kv_row_bytes());
      const models::KvPools pools = m->allocate_kv_pools(3, 16, Device::cpu(), true, "test");
      REQUIRE(static_cast<int64_t>(pools.k.size()) == c.n_layer);
      CHECK(pools.bytes() == 3 * m->kv_block_bytes(16));
      std::map<std::string, Tensor> feeds;
      m->bind_kv_pools(pools, feeds);
      CHECK(static_cast<int64_t>(feeds.size()) == 2 * c.n_layer);

      const models::DecoderBindings b = models::DecoderBindings::from(m->signature, m->path);
      CHECK(b.ids == ids->name);
      CHECK(static_cast<int64_t>(b.k_cache.size()) == c.n_layer);
      CHECK(b.logits_output == 0);
    }
  }
}

TEST_CASE("load_model: failures name the model", "[model]") {
  test::expect_error([] { models::load_model("/nonexistent/model", {}); }, ErrorCode::kNotFound,
                     {"/nonexistent/model: model directory does not exist"});
  // A signature without a decoder's roles is refused by the decoder runtimes, naming the model.
  models::Signature sig;
  sig.inputs.push_back({"x", "", TensorRole::kData, DType::kF32, {graph::Dim::sym("n")}});
  test::expect_error([&] { models::DecoderBindings::from(sig, "resnet.onnx"); },
                     ErrorCode::kUnsupported, {"resnet.onnx: not a decoder model"});
}


TEST_CASE("upload_constants on the CPU copies large file-mapped weights onto huge pages",
          "[model]") {
  const char* hp = std::getenv("SAMPAN_HUGE_PAGES");
  const bool on = hp == nullptr || std::string(hp) != "0";
  test::TempDir dir("localize");
  // A 3 MiB weight and a 64 KiB one in one file, the bytes a known pattern.
  constexpr int64_t kBig = 3 << 20, kSmall = 64 << 10;
  const std::string path = (dir.path / "w.bin").string();
  {
    std::ofstream out(path, std::ios::binary);
    for (int64_t i = 0; i < kBig + kSmall; ++i) out.put(static_cast<char>((i * 7 + i / 4096) & 0xff));
  }
  auto file = MappedFile::open(path);
  auto storage = Storage::wrap_mapped(file->data(), file->size(), file);
  models::Model m;
  const Tensor big = Tensor::from_storage(storage, 0, {kBig / 4}, DType::kF32);
  const Tensor small = Tensor::from_storage(storage, kBig, {kSmall / 4}, DType::kF32);
  const graph::ValueId x = m.graph.add_input("x", DType::kF32, {graph::Dim::fixed(kBig / 4)});
  const graph::ValueId a = m.graph.add_constant("big", big);
  const graph::ValueId tied = m.graph.add_constant("big_again", big);  // a tied weight
  const graph::ValueId b = m.graph.add_constant("small", small);
  m.graph.mark_output(m.graph.add("add", "sum", {x, a}));
  // Every page of the mapping resident before the copy, as after a forward pass.
  uint64_t touch = 0;
  for (size_t i = 0; i < file->size(); i += 4096) touch += file->data()[i];
  CHECK(touch > 0);
  const int64_t rss_before = test::smaps_field(file->data(), "Rss:") * 1024;
  m.upload_constants(Device::cpu());
  const int64_t rss_after = test::smaps_field(file->data(), "Rss:") * 1024;  // before anything reads the mapping

  const Tensor& nb = m.graph.value(a).constant;
  const Tensor& nt = m.graph.value(tied).constant;
  const Tensor& ns = m.graph.value(b).constant;
  CHECK(ns.raw() == small.raw());  // under 2 MiB: stays mapped
  REQUIRE(nb.nbytes() == kBig);
  const auto* got = static_cast<const uint8_t*>(nb.raw());
  int64_t wrong = 0;
  for (int64_t i = 0; i < kBig; ++i) wrong += got[i] != static_cast<uint8_t>((i * 7 + i / 4096) & 0xff);
  CHECK(wrong == 0);  // the file's bytes
  if (on) {
    CHECK(m.huge_page_weights == 1);
    CHECK_FALSE(nb.storage()->file_mapped());
    CHECK_FALSE(nb.storage()->read_only());
    CHECK(reinterpret_cast<uintptr_t>(nb.raw()) % kCpuHugePageBytes == 0);
    CHECK(nt.raw() == nb.raw());  // one copy for the tied pair
    // The copied pages left the process: the mapping keeps at most the small weight's and the
    // partial pages at the ends.
    INFO("mapping Rss before " << rss_before << ", after " << rss_after);
    CHECK(rss_before >= kBig);
    CHECK(rss_after <= kSmall + 2 * 4096);
  } else {
    CHECK(m.huge_page_weights == 0);
    CHECK(nb.raw() == big.raw());
  }
  // A second call finds nothing more to copy.
  m.upload_constants(Device::cpu());
  CHECK(m.huge_page_weights == (on ? 1 : 0));
}
