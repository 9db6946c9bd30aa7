// runtime::TensorSession (what `sampan serve` runs classic models with) on the committed
// bert_tiny.onnx: validation against the signature with one-line errors naming the input, a
// run error confined to its request, concurrent runs; and the KServe decoding of tensor
// requests (server/kserve_decode.h) that feeds it.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <map>
#include <optional>
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

namespace {

std::shared_ptr<const sampan::models::Model> bert_model() {
  static std::shared_ptr<const sampan::models::Model> model =
      sampan::models::load_model(classic("bert_tiny.onnx"), {});
  return model;
}

// A session that merges up to `max_batch` rows, one executor so that requests queue.
std::shared_ptr<TensorSession> batching_session(int max_batch, std::chrono::milliseconds delay) {
  sampan::runtime::TensorSessionOptions o;
  o.threads = 2;
  o.executors = 1;
  o.max_batch = max_batch;
  o.batch_delay = delay;
  return std::make_shared<TensorSession>(bert_model(), o);
}

struct Answer {
  std::vector<Tensor> outputs;
  std::optional<Error> error;
};

// Submits every request at once and waits for all answers.
std::vector<Answer> submit_all(TensorSession& s, const std::vector<std::map<std::string, Tensor>>& in) {
  std::vector<Answer> answers(in.size());
  std::atomic<int> left{static_cast<int>(in.size())};
  for (size_t i = 0; i < in.size(); ++i) {
    s.submit(in[i], [&answers, &left, i](std::vector<Tensor> out, std::optional<Error> e) {
      answers[i].outputs = std::move(out);
      answers[i].error = std::move(e);
      --left;
    });
  }
  REQUIRE(s.wait_idle(std::chrono::seconds(30)));
  REQUIRE(left == 0);
  return answers;
}

}  // namespace

TEST_CASE("tensor session: dynamic batching merges matching requests, each gets its rows",
          "[tensor_session]") {
  auto s = batching_session(8, std::chrono::milliseconds(300));
  REQUIRE(s->batchable());
  // Four 1 x 16 requests (mergeable: 4 rows) and two 3 x 37 ones (another shape: 6 rows).
  std::vector<std::map<std::string, Tensor>> in;
  std::vector<int> kind;
  for (int k : {0, 1, 0, 0, 1, 0}) {
    in.push_back(bert_inputs(k));
    kind.push_back(k);
  }
  const std::vector<Answer> got = submit_all(*s, in);
  const sampan::runtime::TensorBatchStats st = s->batch_stats();
  CHECK(st.runs == 2);
  CHECK(st.requests == 6);
  CHECK(st.rows == 4 * 1 + 2 * 3);
  // Against torch (the goldens) and against the same request run alone.
  auto alone = bert_session();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i << " (bert_tiny." << kind[i] << ")");
    REQUIRE_FALSE(got[i].error.has_value());
    REQUIRE(got[i].outputs.size() == 2);
    const std::string k = std::to_string(kind[i]);
    CHECK(max_abs_diff(got[i].outputs[0],
                       sampan::read_npy(classic("bert_tiny." + k + ".last_hidden_state.npy"))) < 1e-3f);
    CHECK(max_abs_diff(got[i].outputs[1],
                       sampan::read_npy(classic("bert_tiny." + k + ".pooler_output.npy"))) < 1e-3f);
    const std::vector<Tensor> ref = alone->run(in[i]);
    CHECK(max_abs_diff(got[i].outputs[0], ref[0]) < 1e-5f);
    CHECK(max_abs_diff(got[i].outputs[1], ref[1]) < 1e-5f);
  }
}

TEST_CASE("tensor session: dynamic batching stops at max_batch rows", "[tensor_session]") {
  auto s = batching_session(2, std::chrono::milliseconds(300));
  std::vector<std::map<std::string, Tensor>> in(5, bert_inputs(0));
  in.push_back(bert_inputs(1));  // 3 rows: more than max_batch, runs alone
  const std::vector<Answer> got = submit_all(*s, in);
  for (const Answer& a : got) CHECK_FALSE(a.error.has_value());
  const sampan::runtime::TensorBatchStats st = s->batch_stats();
  CHECK(st.runs == 4);  // 2 + 2 + 1 rows of the 1-row requests, then the 3-row one
  CHECK(st.requests == 6);
  CHECK(st.rows == 8);
}

TEST_CASE("tensor session: a bad request in a merged batch fails alone", "[tensor_session]") {
  auto s = batching_session(8, std::chrono::milliseconds(300));
  auto bad = bert_inputs();
  bad["input_ids"] = bad["input_ids"].clone();
  bad["input_ids"].data<int64_t>()[3] = 1000000;
  const std::vector<Answer> got = submit_all(*s, {bert_inputs(0), bad, bert_inputs(0)});
  REQUIRE(got[1].error.has_value());
  CHECK(got[1].error->code() == ErrorCode::kInvalidArgument);
  CHECK(contains(*got[1].error, "node '"));
  const Tensor want = sampan::read_npy(classic("bert_tiny.0.last_hidden_state.npy"));
  for (size_t i : {size_t{0}, size_t{2}}) {
    REQUIRE_FALSE(got[i].error.has_value());
    CHECK(max_abs_diff(got[i].outputs[0], want) < 1e-3f);
  }
}

TEST_CASE("tensor session: a signature without a shared first dimension is not batchable",
          "[tensor_session]") {
  auto m = std::make_shared<sampan::models::Model>(*bert_model());
  m->signature.outputs[1].shape[1] = sampan::graph::Dim::sym("batch");
  sampan::runtime::TensorSessionOptions o;
  o.max_batch = 8;
  TensorSession s(m, o);
  CHECK_FALSE(s.batchable());
  CHECK(s.not_batchable_reason().find("pooler_output") != std::string::npos);
  // Requests still run, one by one.
  const std::vector<Answer> got = submit_all(s, {bert_inputs(0), bert_inputs(0)});
  CHECK_FALSE(got[0].error.has_value());
  CHECK(s.batch_stats().runs == 2);
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
