// runtime::TensorSession (what `sampan serve` runs classic models with) on the committed
// bert_tiny.onnx: validation against the signature with one-line errors naming the input, a
// run error confined to its request, concurrent runs; and the KServe decoding of tensor
// requests (server/kserve_decode.h) that feeds it.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/npy.h"
#include "engine/runtime/tensor_session.h"
#include "server/gateway.h"
#include "server/kserve_decode.h"

using sampan::DType;
using sampan::Error;
using sampan::ErrorCode;
using sampan::Tensor;
using sampan::runtime::TensorSession;
using sampan::server::Json;

namespace {

std::string classic(const std::string& file) {
  return std::string(SAMPAN_SOURCE_DIR) + "/tests/data/classic/" + file;
}

std::shared_ptr<TensorSession> bert_session() {
  static std::shared_ptr<const sampan::models::Model> model =
      sampan::models::load_model(classic("bert_tiny.onnx"), {});
  sampan::runtime::TensorSessionOptions o;
  o.threads = 2;
  o.executors = 2;
  return std::make_shared<TensorSession>(model, o);
}

std::map<std::string, Tensor> bert_inputs(int k = 0) {
  std::map<std::string, Tensor> in;
  for (const char* n : {"input_ids", "attention_mask", "token_type_ids"}) {
    in[n] = sampan::read_npy(classic("bert_tiny." + std::to_string(k) + "." + n + ".npy"));
  }
  return in;
}

Error thrown(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error thrown");
  return Error(ErrorCode::kInternal, "unreachable");
}

bool contains(const Error& e, const std::string& s) {
  return std::string(e.what()).find(s) != std::string::npos;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  }
  return m;
}

}  // namespace

TEST_CASE("tensor session: runs bert_tiny as torch did", "[tensor_session]") {
  auto s = bert_session();
  for (int k : {0, 1}) {
    const std::vector<Tensor> out = s->run(bert_inputs(k));
    REQUIRE(out.size() == 2);
    const Tensor want = sampan::read_npy(classic("bert_tiny." + std::to_string(k) +
                                                 ".last_hidden_state.npy"));
    CHECK(max_abs_diff(out[0], want) < 1e-3f);
  }
}

TEST_CASE("tensor session: validation names the input", "[tensor_session]") {
  auto s = bert_session();
  auto in = bert_inputs();

  auto e = thrown([&] {
    auto x = in;
    x["nope"] = x["input_ids"];
    s->validate(x);
  });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(e.field() == "nope");
  CHECK(contains(e, "unknown input 'nope'"));

  e = thrown([&] {
    auto x = in;
    x.erase("token_type_ids");
    s->validate(x);
  });
  CHECK(e.field() == "token_type_ids");
  CHECK(contains(e, "missing"));

  e = thrown([&] {
    auto x = in;
    x["input_ids"] = Tensor::zeros({1, 16}, DType::kI32);
    s->validate(x);
  });
  CHECK(e.field() == "input_ids");
  CHECK(contains(e, "i32"));
  CHECK(contains(e, "i64"));

  e = thrown([&] {
    auto x = in;
    x["attention_mask"] = x["attention_mask"].reshape({1, 1, 16});
    s->validate(x);
  });
  CHECK(e.field() == "attention_mask");
  CHECK(contains(e, "[batch, sequence]"));

  e = thrown([&] {
    auto x = in;
    x["token_type_ids"] = Tensor::zeros({1, 15}, DType::kI64);
    s->validate(x);
  });
  CHECK(e.field() == "token_type_ids");
  CHECK(contains(e, "sequence"));

  e = thrown([&] {
    std::map<std::string, Tensor> x;
    for (const char* n : {"input_ids", "attention_mask", "token_type_ids"})
      x[n] = Tensor::zeros({0, 4}, DType::kI64);
    s->validate(x);
  });
  CHECK(contains(e, "at least 1"));
  CHECK(std::string(e.what()).find('\n') == std::string::npos);
}

TEST_CASE("tensor session: a run error is that request's only", "[tensor_session]") {
  auto s = bert_session();
  auto bad = bert_inputs();
  bad["input_ids"] = bad["input_ids"].clone();
  bad["input_ids"].data<int64_t>()[3] = 1000000;
  const Error e = thrown([&] { s->run(bad); });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(contains(e, "node '"));
  // Both executors still answer.
  std::atomic<int> good{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) {
        const auto out = s->run(bert_inputs((t + i) % 2));
        if (out.size() == 2 && out[1].shape()[1] == 64) ++good;
      }
    });
  }
  for (auto& t : ts) t.join();
  CHECK(good == 12);
  CHECK(s->wait_idle(std::chrono::seconds(5)));
  CHECK(s->running() == 0);
  s->shutdown();
  CHECK(thrown([&] { s->run(bert_inputs()); }).code() == ErrorCode::kUnavailable);
}

TEST_CASE("kserve tensor decoding: JSON, binary and proto", "[tensor_session]") {
  using sampan::server::parse_kserve_tensor_json;
  const Json body = Json::parse(R"({"id": "a", "inputs": [
      {"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4.5]]},
      {"name": "m", "datatype": "BOOL", "shape": [2], "data": [true, false]},
      {"name": "b", "datatype": "INT64", "shape": [2], "parameters": {"binary_data_size": 16}}],
      "outputs": [{"name": "y", "parameters": {"binary_data": true}}]})");
  std::string bin(16, '\0');
  const int64_t v[2] = {7, -9};
  std::memcpy(bin.data(), v, 16);
  auto r = parse_kserve_tensor_json(body, bin);
  REQUIRE(r.inputs.size() == 3);
  CHECK(r.inputs[0].value.data<float>()[3] == 4.5f);
  CHECK(r.inputs[1].value.dtype() == DType::kBool);
  CHECK(r.inputs[2].value.data<int64_t>()[1] == -9);
  REQUIRE(r.outputs.size() == 1);
  CHECK(r.outputs[0].binary);

  auto refused = [&](const char* json, const std::string& binary, const char* field) {
    Error e = thrown([&] { parse_kserve_tensor_json(Json::parse(json), binary); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.field() == field);
  };
  refused(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2]}]})", "", "x");
  refused(R"({"inputs": [{"name": "x", "datatype": "FP64", "shape": [1], "data": [1]}]})", "", "x");
  refused(R"({"inputs": [{"name": "x", "datatype": "INT8", "shape": [1], "data": [300]}]})", "", "x");
  refused(R"({"inputs": [{"name": "x", "datatype": "INT64", "shape": [2],
              "parameters": {"binary_data_size": 8}}]})", std::string(8, '\0'), "x");
  refused(R"({"inputs": [{"name": "x", "datatype": "INT64", "shape": [2],
              "parameters": {"binary_data_size": 16}}]})", std::string(8, '\0'), "x");
  refused(R"({"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [1]}]})",
          std::string(8, '\0'), "inputs");
  // A huge declared shape is refused before anything is allocated.
  refused(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1099511627776, 1099511627776],
              "data": [1]}]})", "", "x");
}
