// CUDA graphs (graph/executor.h: recurring runs; runtime/engine.h: cuda_graphs) against the same
// work launched node by node and against the CPU backend.
//
//   causal_lm: a tiny model decoding token by token on the GPU with graphs (recorded on the
//     second step, replayed from the third) gives the logits of the same model with graphs off
//     (the same kernels with the same arguments: equal to 1e-5, not just close) and the CPU's
//     greedy tokens (up to a step where the CPU itself nearly ties: expect_same_greedy); the
//     executor reports captures and replays and no failure.
//   invalidation: a long prompt after some decode steps makes the executor plan a larger arena,
//     which drops the recorded graphs (they hold the old addresses); decoding afterwards records
//     again and still matches the node-by-node logits.
//   quantized: INT4 weights and an INT4 KV cache (the GEMV and the quantized-KV decode kernels
//     inside a recorded graph) match node by node too.
//   engine: the batched Engine pads decode-only steps to 1, 2, 4, 8, 16, ... tokens and replays
//     them; 9 concurrent greedy requests of ragged lengths give the tokens of the GPU Engine
//     with graphs off, exactly, and of the CPU Engine (up to a near tie, as above), and the
//     engine reports replays. Every other request
//     asks for no logprobs, so it is sampled on the GPU (device_sampler.h) in the same steps as
//     the others are sampled on the host: greedy ids must be the CPU's either way.
//   seeded sampling on the GPU: temperature 0.8 / top_p 0.9 with a seed gives the same tokens
//     on two engines (the draw is a function of seed and step, not of the batch).
//   bad ids: a replayed step runs no host checks, so CausalLm refuses an id outside the
//     vocabulary before anything runs, and the next step (replayed) is still right.
//
// Without a GPU the binary exits 77 (cuda_test_util.cc's main).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/runtime/causal_lm.h"
#include "engine/runtime/engine.h"
#include "tests/cuda/cuda_model_util.h"
#include "tests/cuda/cuda_test_util.h"

using namespace sampan;
using namespace sampan::runtime;
using namespace sampan::cuda_test;

namespace {

// The serve model of test_engine, made once for this binary.
const std::string& serve_model() {
  static const std::string dir = make_serve_model("test_cuda_graphs_model");
  return dir;
}

std::unique_ptr<CausalLm> load_lm(const std::string& dir, Device device, bool graphs,
                                  const models::ModelBuildOptions& build = {}) {
  CausalLmOptions o;
  o.threads = 2;
  o.max_context = 256;
  o.build = build;
  o.device = device;
  o.cuda_graphs = graphs;
  return CausalLm::load(dir, o);
}

// Prefills `prompt`, then feeds `steps` tokens one at a time (the greedy choice of the logits
// before, so every step depends on the last); returns every step's logits row.
std::vector<std::vector<float>> decode(CausalLm& lm, const std::vector<int32_t>& prompt,
                                       int steps) {
  const int64_t vocab = lm.config().vocab_size;
  Tensor logits = lm.forward(prompt, false);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < steps; ++i) {
    REQUIRE(logits.device() == Device::cpu());
    rows.emplace_back(logits.data<float>(), logits.data<float>() + vocab);
    const int32_t next = static_cast<int32_t>(argmax(logits.data<float>(), vocab));
    logits = lm.forward(std::vector<int32_t>{next}, false);
  }
  return rows;
}

void expect_same_rows(const std::vector<std::vector<float>>& got,
                      const std::vector<std::vector<float>>& want, float tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i);
    REQUIRE(got[i].size() == want[i].size());
    float worst = 0;
    for (size_t j = 0; j < got[i].size(); ++j) {
      REQUIRE(std::isfinite(got[i][j]));
      worst = std::max(worst, std::abs(got[i][j] - want[i][j]));
    }
    CHECK(worst <= tol);
  }
}

std::vector<int32_t> greedy_tokens(const std::vector<std::vector<float>>& rows) {
  std::vector<int32_t> out;
  for (const auto& r : rows) out.push_back(static_cast<int32_t>(argmax(r.data(), static_cast<int64_t>(r.size()))));
  return out;
}

void check_decode_matches(const std::string& dir, const models::ModelBuildOptions& build) {
  auto graphs = load_lm(dir, kGpu, true, build);
  auto eager = load_lm(dir, kGpu, false, build);
  auto cpu = load_lm(dir, Device::cpu(), false, build);
  const std::vector<int32_t> prompt = random_ids(9, graphs->config().vocab_size, 11);
  const auto got = decode(*graphs, prompt, 40);
  const auto want = decode(*eager, prompt, 40);
  expect_same_rows(got, want, 1e-5f);
  const graph::Executor::GraphStats& st = graphs->graph_stats();
  CHECK(st.failures == 0);
  CHECK(st.captures >= 1);
  CHECK(st.replays >= 37);  // every step from the second of one shape on
  CHECK(eager->graph_stats().replays == 0);
  expect_same_greedy(*cpu, *eager, prompt, greedy_tokens(decode(*cpu, prompt, 40)),
                     greedy_tokens(got));
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

std::vector<std::vector<int32_t>> run_engine(Device device, bool graphs, EngineStats* stats,
                                             const SamplingParams& sampling = greedy()) {
  EngineOptions o;
  o.threads = 2;
  o.max_model_len = 160;
  o.num_kv_blocks = 128;
  o.block_size = 16;
  o.device = device;
  o.cuda_graphs = graphs;
  auto engine = Engine::load(serve_model(), o);
  const int64_t vocab = engine->model_info().vocab_size;
  std::vector<std::unique_ptr<Collected>> got;
  for (uint32_t r = 0; r < 9; ++r) {
    EngineRequest req;
    req.id = std::string("r") + std::to_string(r);  // (GCC 12 warns -Wrestrict on "r" + ...)
    req.prompt = random_ids(3 + 5 * r, vocab, 200 + r);  // ragged: requests finish prefill apart
    req.sampling = sampling;
    req.sampling.logprobs = r % 2 == 0;  // odd requests: sampled on the GPU
    req.max_tokens = 20 + 3 * r;         // and leave the batch one by one
    req.ignore_eos = true;
    got.push_back(std::make_unique<Collected>());
    engine->submit(std::move(req), got.back()->callback());
  }
  std::vector<std::vector<int32_t>> tokens;
  for (auto& c : got) {
    c->wait();
    INFO("error: " << c->error);
    CHECK(c->finish == EngineFinish::kLength);
    tokens.push_back(c->tokens);
  }
  REQUIRE(engine->wait_idle(std::chrono::seconds(30)));
  *stats = engine->stats();
  CHECK(stats->kv_blocks_used == 0);
  return tokens;
}

}  // namespace

TEST_CASE("cuda graphs: replayed decode steps equal node-by-node decode", "[cuda][graphs]") {
  for (const char* name : {"tiny_llama3", "tiny_qwen2", "tiny_mistral"}) {
    SECTION(name) { check_decode_matches(tiny_model(name), {}); }
  }
}

TEST_CASE("cuda graphs: INT4 weights and an INT4 KV cache inside a graph", "[cuda][graphs]") {
  models::ModelBuildOptions b;
  b.quantization.format = models::WeightFormat::kInt4;
  b.quantization.group_size = 32;
  b.kv_cache_dtype = KvDtype::kI4;
  check_decode_matches(tiny_model("tiny_llama3"), b);
}

TEST_CASE("cuda graphs: a larger arena drops the recorded graphs and decoding stays right",
          "[cuda][graphs]") {
  const std::string dir = tiny_model("tiny_llama3");
  auto graphs = load_lm(dir, kGpu, true);
  auto eager = load_lm(dir, kGpu, false);
  const int64_t vocab = graphs->config().vocab_size;
  const std::vector<int32_t> short_prompt = random_ids(4, vocab, 5);
  expect_same_rows(decode(*graphs, short_prompt, 8), decode(*eager, short_prompt, 8), 1e-5f);
  const int64_t captures_before = graphs->graph_stats().captures;
  CHECK(captures_before >= 1);
  // 160 tokens in one forward need a larger arena than any step so far.
  graphs->reset();
  eager->reset();
  const std::vector<int32_t> long_prompt = random_ids(160, vocab, 6);
  expect_same_rows(decode(*graphs, long_prompt, 12), decode(*eager, long_prompt, 12), 1e-5f);
  CHECK(graphs->graph_stats().captures > captures_before);  // recorded again
  CHECK(graphs->graph_stats().failures == 0);
}

TEST_CASE("cuda graphs: an id outside the vocabulary is refused before a replay",
          "[cuda][graphs]") {
  auto lm = load_lm(tiny_model("tiny_llama3"), kGpu, true);
  auto eager = load_lm(tiny_model("tiny_llama3"), kGpu, false);
  const int64_t vocab = lm->config().vocab_size;
  const std::vector<int32_t> prompt = random_ids(5, vocab, 9);
  const auto before = decode(*lm, prompt, 6);  // shapes recorded and replayed
  const int64_t n_past = lm->n_past();
  try {
    lm->forward(std::vector<int32_t>{static_cast<int32_t>(vocab)}, false);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find("outside the vocabulary") != std::string::npos);
  }
  CHECK(lm->n_past() == n_past);  // nothing ran, nothing was cached
  const Tensor got = lm->forward(std::vector<int32_t>{7}, false);
  decode(*eager, prompt, 6);
  const Tensor want = eager->forward(std::vector<int32_t>{7}, false);
  expect_same_rows({std::vector<float>(got.data<float>(), got.data<float>() + vocab)},
                   {std::vector<float>(want.data<float>(), want.data<float>() + vocab)}, 1e-5f);
}

TEST_CASE("cuda graphs: the padded, replayed Engine generates the CPU's tokens",
          "[cuda][graphs]") {
  EngineStats cpu_stats, graph_stats, eager_stats;
  const auto want = run_engine(Device::cpu(), true, &cpu_stats);
  const auto got = run_engine(kGpu, true, &graph_stats);
  const auto eager = run_engine(kGpu, false, &eager_stats);
  REQUIRE(want.size() == got.size());
  auto cpu_lm = load_lm(serve_model(), Device::cpu(), false);
  auto gpu_lm = load_lm(serve_model(), kGpu, false);
  const int64_t vocab = cpu_lm->config().vocab_size;
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("request " << i);
    CHECK(got[i].size() == 20 + 3 * i);
    CHECK(got[i] == eager[i]);  // replayed and padded or not, the same kernels on the same GPU
    const uint32_t r = static_cast<uint32_t>(i);
    expect_same_greedy(*cpu_lm, *gpu_lm, random_ids(3 + 5 * r, vocab, 200 + r), want[i], got[i]);
  }
  CHECK(cpu_stats.cuda_graph_replays == 0);  // graphs exist only on a CUDA device
  CHECK(eager_stats.cuda_graph_replays == 0);
  CHECK(graph_stats.cuda_graph_captures >= 2);  // several padded batch sizes
  CHECK(graph_stats.cuda_graph_replays > 20);
}

TEST_CASE("cuda graphs: seeded sampling on the GPU is reproducible across engines",
          "[cuda][graphs]") {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.seed = 1234;
  EngineStats a_stats, b_stats;
  const auto a = run_engine(kGpu, true, &a_stats, p);
  const auto b = run_engine(kGpu, false, &b_stats, p);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("request " << i);
    CHECK(a[i].size() == 20 + 3 * i);
    // Odd requests drew on the GPU: the same seed gives the same tokens, graphs or not. (Even
    // ones drew on the CPU, also seeded, so they match too.)
    CHECK(a[i] == b[i]);
  }
}
