// The serving Engine (continuous batching over the paged KV cache) against the single-sequence
// path: runtime::generate() on CausalLm, whose cache is one contiguous block per layer and which
// is validated against HF goldens elsewhere. Greedy outputs must be token-for-token identical
// however requests are batched, chunked, paged, preempted or served from the prefix cache.
//
// The model (tests/reference/make_serve_model.py) is the demo Llama with random attention-output
// and MLP-down projections, so each token depends on the whole context through the KV cache: a
// wrong block table, position or stale cache row changes the output.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engine/core/error.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/generate.h"
#include "engine/runtime/json_schema.h"

using namespace sampan;
using namespace sampan::runtime;

namespace {

constexpr int64_t kMaxModelLen = 160;

const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string out = std::string(SAMPAN_BINARY_DIR) + "/test_engine_model";
    const std::string cmd = "python3 " + std::string(SAMPAN_SOURCE_DIR) +
                            "/tests/reference/make_serve_model.py --out " + out;
    REQUIRE(std::system(cmd.c_str()) == 0);
    return out;
  }();
  return dir;
}

struct Reference {
  std::unique_ptr<CausalLm> lm;
  std::unique_ptr<tok::Tokenizer> tokenizer;
};

// One single-sequence reference per KV-cache format: a quantized engine must match CausalLm
// with the same format (the same rows, quantized the same way), not the f32 one.
Reference& reference(KvDtype kv = KvDtype::kF32) {
  // Never destroyed: the models' tensors must not outlive the allocator they came from, and a
  // function-local static here could be destroyed after it at exit.
  static auto* refs = new std::map<KvDtype, Reference>;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  Reference& r = (*refs)[kv];
  if (!r.lm) {
    CausalLmOptions o;
    o.max_context = kMaxModelLen;
    o.build.kv_cache_dtype = kv;
    r.lm = CausalLm::load(model_dir(), o);
    r.tokenizer = tok::load_tokenizer(model_dir());
  }
  return r;
}

struct Expected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of each generated token (a stop id's too, if one ended it)
  std::string text;
  EngineFinish finish;
  std::string stop_matched;
};

Expected run_reference(const EngineRequest& req, KvDtype kv = KvDtype::kF32) {
  Reference& r = reference(kv);
  GenerationRequest g;
  g.prompt = req.prompt;
  g.sampling = req.sampling;
  g.max_tokens = req.max_tokens;
  g.stop = req.stop;
  g.stop_ids = req.stop_ids;
  g.ignore_eos = req.ignore_eos;
  g.json_object = req.json_object;
  g.grammar = req.grammar;
  g.reuse_prefix = false;
  std::vector<float> logprobs;
  const GenerationResult res = generate(*r.lm, *r.tokenizer, g, [&](const GenerationEvent& ev) {
    logprobs.push_back(ev.sample.logprob);
  });
  return {res.tokens, logprobs, res.text,
          res.finish == FinishReason::kStop ? EngineFinish::kStop : EngineFinish::kLength,
          res.stop_matched};
}

// Everything the engine sent for one request.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  int n_final = 0;
  EngineEvent final_event;

  EventCallback callback() {
    return [this](const EngineEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.token >= 0) {
        tokens.push_back(ev.token);
        logprobs.push_back(ev.sample.logprob);
      }
      text += ev.text;
      if (ev.finished) {
        ++n_final;
        final_event = ev;
        cv.notify_all();
      }
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return n_final > 0; }));
  }
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t n) {
  // Ids from 3: 0..2 are <unk>, <s>, </s> in the Llama SentencePiece vocabulary.
  std::uniform_int_distribution<int32_t> id(3, 31999);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& x : p) x = id(rng);
  return p;
}

// Requests of awkward prompt lengths (1, 7, 17, 33, ...) and output lengths; half stop on eos.
std::vector<EngineRequest> make_requests(int n, uint32_t seed) {
  static const int64_t kPromptLens[] = {1, 7, 17, 33, 5, 64, 2, 100, 15, 48, 9, 77};
  static const int64_t kMaxTokens[] = {1, 9, 30, 17, 40, 3, 25, 12};
  std::mt19937 rng(seed);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < n; ++i) {
    EngineRequest r;
    r.id = std::to_string(i);
    r.prompt = random_prompt(rng, kPromptLens[i % 12]);
    r.max_tokens = kMaxTokens[i % 8];
    r.sampling.temperature = 0;
    r.ignore_eos = i % 2 == 0;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

EngineOptions small_options() {
  EngineOptions o;
  o.threads = 2;
  o.max_model_len = kMaxModelLen;
  o.num_kv_blocks = 128;
  return o;
}

// Submits every request at once and checks each against the single-sequence reference.
void check_against_reference(Engine& engine, const std::vector<EngineRequest>& reqs) {
  const KvDtype kv = engine.options().build.kv_cache_dtype;
  std::vector<std::unique_ptr<Collected>> got;
  for (const EngineRequest& r : reqs) {
    got.push_back(std::make_unique<Collected>());
    engine.submit(r, got.back()->callback());
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    got[i]->wait();
    const Expected want = run_reference(reqs[i], kv);
    INFO("request " << i << " prompt " << reqs[i].prompt.size() << " max_tokens "
                    << reqs[i].max_tokens);
    CHECK(got[i]->n_final == 1);
    CHECK(got[i]->tokens == want.tokens);
    // Logprobs too: a corrupted KV row shifts them long before it flips a greedy choice. Not
    // bit-equal (batched and single-sequence products round differently).
    for (size_t t = 0; t < std::min(got[i]->logprobs.size(), want.logprobs.size()); ++t) {
      INFO("token " << t);
      CHECK(std::abs(got[i]->logprobs[t] - want.logprobs[t]) < 1e-3f);
    }
    CHECK(got[i]->text == want.text);
    CHECK(got[i]->final_event.finish == want.finish);
    CHECK(got[i]->final_event.stop_matched == want.stop_matched);
    CHECK(got[i]->final_event.usage.prompt_tokens == static_cast<int64_t>(reqs[i].prompt.size()));
    CHECK(got[i]->final_event.usage.completion_tokens ==
          static_cast<int64_t>(want.tokens.size()));
  }
  REQUIRE(engine.wait_idle(std::chrono::seconds(30)));
  const EngineStats st = engine.stats();
  CHECK(st.running == 0);
  CHECK(st.waiting == 0);
  CHECK(st.kv_blocks_used == 0);
}

// With `o` but a cache of one max_model_len sequence (10 blocks of 16) and no more, n long
// requests force preemptions; every one must still match the reference.
void check_under_preemption(EngineOptions o, int n, uint32_t seed) {
  o.block_size = 16;
  o.num_kv_blocks = 10;
  auto engine = Engine::load(model_dir(), o);
  std::vector<EngineRequest> reqs = make_requests(n, seed);
  for (EngineRequest& r : reqs) {
    r.ignore_eos = true;
    r.max_tokens = 40;
  }
  check_against_reference(*engine, reqs);
  CHECK(engine->stats().preemptions > 0);
}

}  // namespace

TEST_CASE("engine: concurrent greedy requests equal single-sequence generate", "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  std::atomic<int> max_batch{0};
  engine->set_step_observer([&](const StepStats& s) {
    max_batch = std::max(max_batch.load(), s.n_sequences);
  });
  for (int n : {1, 8, 24}) {
    INFO("N = " << n);
    check_against_reference(*engine, make_requests(n, 100 + static_cast<uint32_t>(n)));
  }
  CHECK(max_batch > 1);  // requests really were batched
}

// The padding that CUDA graphs need (engine.h: cuda_graphs), run on the CPU: decode-only steps
// of 3, 5, 9 ... sequences run as 4, 8, 16 ... tokens with full-width block tables, the padding
// tokens writing a spare block. Every request must still match the single-sequence reference,
// and the spare block must not be handed to a sequence (few blocks force preemption too).
TEST_CASE("engine: decode steps padded to fixed shapes equal single-sequence generate", "[engine]") {
  EngineOptions o = small_options();
  o.pad_decode_steps = true;
  auto engine = Engine::load(model_dir(), o);
  CHECK(engine->stats().kv_blocks_total == o.num_kv_blocks);
  std::atomic<int> max_decode{0};
  engine->set_step_observer([&](const StepStats& s) {
    if (s.n_decode == s.n_sequences) max_decode = std::max(max_decode.load(), s.n_decode);
  });
  for (int n : {1, 3, 9, 24}) {
    INFO("N = " << n);
    check_against_reference(*engine, make_requests(n, 500 + static_cast<uint32_t>(n)));
  }
  CHECK(max_decode > 8);  // batches past the power-of-two buckets were padded

  check_under_preemption(o, 6, 77);
}

TEST_CASE("engine: chunked prefill under a tiny token budget", "[engine]") {
  EngineOptions o = small_options();
  o.max_batched_tokens = 8;
  auto engine = Engine::load(model_dir(), o);
  int64_t max_tokens_in_step = 0;
  engine->set_step_observer([&](const StepStats& s) {
    max_tokens_in_step = std::max(max_tokens_in_step, s.n_tokens);
  });
  check_against_reference(*engine, make_requests(8, 7));
  CHECK(max_tokens_in_step <= 8);
}

TEST_CASE("engine: few KV blocks force preemption, outputs unchanged", "[engine]") {
  check_under_preemption(small_options(), 8, 21);
}

TEST_CASE("engine: block sizes 1, 16, 32", "[engine]") {
  for (int64_t bs : {1, 16, 32}) {
    INFO("block_size " << bs);
    EngineOptions o = small_options();
    o.block_size = bs;
    o.num_kv_blocks = 2048 / bs;
    auto engine = Engine::load(model_dir(), o);
    check_against_reference(*engine, make_requests(8, 300 + static_cast<uint32_t>(bs)));
  }
}

TEST_CASE("engine: prefix cache serves a repeated long prompt", "[engine]") {
  EngineOptions o = small_options();
  o.block_size = 16;
  auto engine = Engine::load(model_dir(), o);
  std::mt19937 rng(5);
  EngineRequest r;
  r.prompt = random_prompt(rng, 90);
  r.max_tokens = 20;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  check_against_reference(*engine, {r});
  const EngineStats before = engine->stats();
  Collected second;
  engine->submit(r, second.callback());
  second.wait();
  const EngineStats after = engine->stats();
  // 90 prompt tokens + 19 computed generated ones: 6 full blocks of 16 are cached; the match
  // stops before the last prompt token, so at most 80 tokens (5 blocks) are served.
  CHECK(second.final_event.usage.cached_prompt_tokens == 80);
  CHECK(after.prefix_hit_tokens - before.prefix_hit_tokens == 80);
  CHECK(after.prefix_query_tokens > before.prefix_query_tokens);
  CHECK(second.tokens == run_reference(r).tokens);
  REQUIRE(engine->wait_idle(std::chrono::seconds(10)));
  CHECK(engine->stats().kv_blocks_used == 0);
}

// Prompt logprobs against the single-sequence path's logits of the whole prompt (CausalLm,
// all_logits): computed over chunks of a small token budget, through preemptions (a sequence
// preempted mid-prompt recomputes positions it already scored, which must not be scored
// twice), and for a prompt whose blocks the prefix cache holds (scored anyway).
TEST_CASE("engine: prompt logprobs equal the single-sequence logits", "[engine]") {
  EngineOptions o = small_options();
  // The 40-token prompt and the first chunk of the 150-token one share a step; the latter,
  // mid-prompt when the cache (one max_model_len sequence) runs out, is preempted.
  o.max_batched_tokens = 64;
  o.num_kv_blocks = 10;
  auto engine = Engine::load(model_dir(), o);
  std::mt19937 rng(5);
  std::vector<EngineRequest> reqs;
  for (const int64_t len : {40, 150, 1, 2, 70, 140, 33, 150}) {
    EngineRequest r;
    r.prompt = random_prompt(rng, len);
    r.max_tokens = reqs.empty() ? 20 : 3;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.prompt_logprobs = 4;
    reqs.push_back(std::move(r));
  }
  reqs.back().prompt = reqs[1].prompt;  // cached by the second by the time it runs
  std::vector<std::vector<SampleResult>> got(reqs.size());
  std::vector<int> first_events(reqs.size(), 0);
  std::vector<std::unique_ptr<Collected>> done;
  std::mutex mu;
  for (size_t i = 0; i < reqs.size(); ++i) {
    done.push_back(std::make_unique<Collected>());
    EventCallback inner = done.back()->callback();
    engine->submit(reqs[i], [&, i, inner](const EngineEvent& ev) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!ev.prompt_logprobs.empty() || (first_events[i] == 0 && reqs[i].prompt.size() == 1)) {
          got[i] = ev.prompt_logprobs;
          ++first_events[i];
        }
      }
      inner(ev);
    });
  }
  for (auto& c : done) c->wait();
  CHECK(engine->stats().preemptions > 0);
  Reference& ref = reference();
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i << ", prompt of " << reqs[i].prompt.size());
    CHECK(done[i]->final_event.finish == EngineFinish::kLength);
    CHECK(first_events[i] == 1);  // sent once, with the first event
    const size_t n = reqs[i].prompt.size();
    REQUIRE(got[i].size() == n - 1);
    if (n == 1) continue;
    ref.lm->reset();
    const Tensor logits = ref.lm->forward(reqs[i].prompt, /*all_logits=*/true);
    const int64_t vocab = logits.dim(1);
    float worst = 0.0f, worst_top = 0.0f;
    for (size_t t = 0; t + 1 < n; ++t) {
      const float* row = logits.data<float>() + static_cast<int64_t>(t) * vocab;
      double mx = row[0];
      for (int64_t v = 1; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
      double z = 0;
      for (int64_t v = 0; v < vocab; ++v) z += std::exp(row[v] - mx);
      const double log_z = mx + std::log(z);
      const SampleResult& r = got[i][t];
      CHECK(r.id == reqs[i].prompt[t + 1]);
      worst = std::max(worst, static_cast<float>(std::abs(r.logprob - (row[r.id] - log_z))));
      REQUIRE(r.top.size() == 4);
      // The top ids are the four largest logits (ties: lower id), best first.
      std::vector<int32_t> order(static_cast<size_t>(vocab));
      for (int64_t v = 0; v < vocab; ++v) order[static_cast<size_t>(v)] = static_cast<int32_t>(v);
      std::partial_sort(order.begin(), order.begin() + 4, order.end(), [&](int32_t a, int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      for (size_t k = 0; k < 4; ++k) {
        worst_top = std::max(worst_top, static_cast<float>(std::abs(
                                            r.top[k].logprob - (row[order[k]] - log_z))));
      }
    }
    // Not bit-equal: batched and single-sequence products round differently.
    CHECK(worst < 1e-3f);
    CHECK(worst_top < 1e-3f);
  }
  REQUIRE(engine->wait_idle(std::chrono::seconds(30)));
  CHECK(engine->stats().kv_blocks_used == 0);
}

TEST_CASE("engine: stop strings and seeded sampling behave like generate()", "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  std::vector<EngineRequest> reqs = make_requests(8, 77);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EngineRequest& r = reqs[i];
    r.max_tokens = 30;
    r.ignore_eos = true;
    if (i % 2 == 0) {
      // A stop string from the middle of the greedy output, so it really triggers.
      const std::string text = run_reference(r).text;
      REQUIRE(text.size() > 12);
      r.stop = {text.substr(text.size() / 2, 3), "\xff never"};
    } else {
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 50;
      r.sampling.top_p = 0.95f;
      r.sampling.repetition_penalty = 1.1f;
      r.sampling.seed = 1000 + i;
    }
  }
  check_against_reference(*engine, reqs);
}

TEST_CASE("engine: logit_bias bans and forces tokens, batched as generate() does", "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  std::vector<EngineRequest> reqs = make_requests(6, 91);
  for (EngineRequest& r : reqs) {
    r.max_tokens = 12;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
  }
  // 0: unbiased; 1: its greedy first token banned, so the first token differs; 2: one token
  // forced, so every token is that one; 3: seeded sampling with a mixed bias; 4, 5: unbiased.
  const std::vector<int32_t> greedy = run_reference(reqs[1]).tokens;
  reqs[1].sampling.logit_bias = {{greedy[0], -100.0f}};
  reqs[2].sampling.logit_bias = {{1234, 100.0f}};
  reqs[3].sampling.temperature = 0.8f;
  reqs[3].sampling.seed = 17;
  reqs[3].sampling.logit_bias = {{greedy[1], 3.5f}, {greedy[2], -2.0f}, {42, 7.0f}};
  CHECK(run_reference(reqs[1]).tokens[0] != greedy[0]);
  CHECK(run_reference(reqs[2]).tokens == std::vector<int32_t>(12, 1234));
  check_against_reference(*engine, reqs);
  // generate() refuses an id past the vocabulary before running anything.
  EngineRequest bad = reqs[0];
  bad.sampling.logit_bias = {{32000, 1.0f}};
  try {
    run_reference(bad);
    FAIL("no exception");
  } catch (const Error& e) {
    CHECK(e.field() == "logit_bias");
  }
}

TEST_CASE("engine: JSON mode replies are JSON objects, batched as generate() gives them",
          "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  std::vector<EngineRequest> reqs = make_requests(6, 23);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EngineRequest& r = reqs[i];
    r.max_tokens = 40;
    r.json_object = i % 3 != 2;  // unconstrained neighbours in the same steps
    r.sampling.temperature = i % 2 ? 0.9f : 0.0f;
    r.sampling.seed = 100 + i;
    // '}' and '"' of the test vocabulary, nudged so that the random model closes what it opens.
    r.sampling.logit_bias = {{29913, 6.0f}, {29908, 6.0f}};
  }
  check_against_reference(*engine, reqs);
  int objects = 0;
  for (const EngineRequest& r : reqs) {
    if (!r.json_object) continue;
    const Expected e = run_reference(r);
    INFO(e.text);
    CHECK(!e.text.empty());
    CHECK(e.text.front() == '{');
    if (e.finish != EngineFinish::kStop) continue;
    CHECK(nlohmann::json::accept(e.text));
    CHECK(nlohmann::json::parse(e.text).is_object());
    ++objects;
  }
  CHECK(objects >= 2);
}

TEST_CASE("engine: json_schema replies follow the schema, batched as generate() gives them",
          "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  // One grammar shared by several requests (as the n choices of a call share it).
  const auto grammar = compile_json_schema(
      R"({"type":"object","properties":{"id":{"type":"integer"},"tag":{"enum":["x","yz"]},)"
      R"("vals":{"type":"array","items":{"type":"boolean"},"maxItems":2}},)"
      R"("required":["id","tag"]})",
      "schema");
  std::vector<EngineRequest> reqs = make_requests(6, 31);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EngineRequest& r = reqs[i];
    r.max_tokens = 48;
    if (i % 3 != 2) r.grammar = grammar;  // unconstrained neighbours in the same steps
    if (i == 4) r.json_object = true;     // and a JSON-mode one
    if (i == 4) r.grammar = nullptr;
    r.sampling.temperature = i % 2 ? 0.9f : 0.0f;
    r.sampling.seed = 200 + i;
  }
  check_against_reference(*engine, reqs);
  const GrammarMatcher m(*grammar);
  int stopped = 0;
  for (const EngineRequest& r : reqs) {
    if (!r.grammar) continue;
    const Expected e = run_reference(r);
    INFO(e.text);
    if (e.finish != EngineFinish::kStop) continue;
    CHECK(m.matches(e.text));
    const nlohmann::json doc = nlohmann::json::parse(e.text);
    CHECK(doc["id"].is_number_integer());
    CHECK((doc["tag"] == "x" || doc["tag"] == "yz"));
    ++stopped;
  }
  CHECK(stopped >= 2);
  // Both constraints on one request: refused at submission.
  EngineRequest both = reqs[0];
  both.json_object = true;
  CHECK_THROWS_AS(engine->submit(both, [](const EngineEvent&) {}), Error);
}

TEST_CASE("engine: cancellation frees blocks and ends with kCancelled", "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  std::mt19937 rng(9);
  EngineRequest r;
  r.prompt = random_prompt(rng, 40);
  r.max_tokens = 150;
  r.ignore_eos = true;
  r.sampling.temperature = 0;

  // Cancelled from inside its own callback (allowed) after 3 tokens.
  Collected a;
  std::atomic<uint64_t> handle_a{0};
  std::atomic<bool> sent{false};
  EventCallback inner = a.callback();
  handle_a = engine->submit(r, [&](const EngineEvent& ev) {
    inner(ev);
    if (ev.token >= 0 && a.tokens.size() >= 3 && !sent.exchange(true)) {
      while (handle_a == 0) std::this_thread::yield();
      engine->cancel(handle_a);
    }
  });
  // Cancelled from another thread while it runs.
  Collected b;
  engine->set_step_observer([](const StepStats&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  const uint64_t hb = engine->submit(r, b.callback());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  engine->cancel(hb);
  a.wait();
  b.wait();
  CHECK(a.final_event.finish == EngineFinish::kCancelled);
  CHECK(b.final_event.finish == EngineFinish::kCancelled);
  CHECK(a.tokens.size() < 150);
  CHECK(b.tokens.size() < 150);
  CHECK(a.n_final == 1);
  engine->cancel(hb);  // unknown/finished: no-op
  REQUIRE(engine->wait_idle(std::chrono::seconds(10)));
  const EngineStats st = engine->stats();
  CHECK(st.kv_blocks_used == 0);
  CHECK(st.running == 0);
}

TEST_CASE("engine: timeouts end requests with kTimeout", "[engine]") {
  EngineOptions o = small_options();
  o.request_timeout_s = 0.05;
  auto engine = Engine::load(model_dir(), o);
  // Slow steps so that the limit passes long before max_tokens.
  engine->set_step_observer([](const StepStats&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  std::mt19937 rng(11);
  EngineRequest r;
  r.prompt = random_prompt(rng, 10);
  r.max_tokens = 140;
  r.ignore_eos = true;
  Collected by_default, by_request;
  engine->submit(r, by_default.callback());
  r.timeout_s = 0.08;
  engine->submit(r, by_request.callback());
  by_default.wait();
  by_request.wait();
  CHECK(by_default.final_event.finish == EngineFinish::kTimeout);
  CHECK(by_request.final_event.finish == EngineFinish::kTimeout);
  CHECK(by_request.final_event.timings.total_s >= 0.08);
  REQUIRE(engine->wait_idle(std::chrono::seconds(10)));
  CHECK(engine->stats().kv_blocks_used == 0);
}

TEST_CASE("engine: a full waiting queue refuses at once", "[engine]") {
  EngineOptions o = small_options();
  o.max_running = 1;
  o.max_waiting = 2;
  auto engine = Engine::load(model_dir(), o);
  engine->set_step_observer([](const StepStats&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  std::mt19937 rng(12);
  EngineRequest r;
  r.prompt = random_prompt(rng, 10);
  r.max_tokens = 100;
  r.ignore_eos = true;
  std::vector<std::unique_ptr<Collected>> got;
  bool refused = false;
  // One running + two waiting; the fourth submit at the latest must be refused.
  for (int i = 0; i < 4 && !refused; ++i) {
    got.push_back(std::make_unique<Collected>());
    try {
      engine->submit(r, got.back()->callback());
    } catch (const Error& e) {
      refused = true;
      CHECK(e.code() == ErrorCode::kResourceExhausted);
      CHECK(std::string(e.what()).find("max_waiting") != std::string::npos);
      got.pop_back();
    }
  }
  CHECK(refused);
  engine->cancel_all();
  for (auto& g : got) {
    g->wait();
    CHECK(g->final_event.finish == EngineFinish::kCancelled);
  }
  REQUIRE(engine->wait_idle(std::chrono::seconds(10)));
}

TEST_CASE("engine: invalid requests throw naming the field", "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  auto expect_invalid = [&](EngineRequest r, const std::string& needle) {
    INFO(needle);
    bool called = false;
    try {
      engine->submit(std::move(r), [&](const EngineEvent&) { called = true; });
      FAIL("no exception");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
    CHECK_FALSE(called);
  };
  EngineRequest ok;
  ok.prompt = {5, 6, 7};
  EngineRequest r = ok;
  r.prompt.clear();
  expect_invalid(r, "prompt");
  r = ok;
  r.prompt.assign(kMaxModelLen, 5);
  expect_invalid(r, "max_model_len");
  r = ok;
  r.prompt[1] = 32000;
  expect_invalid(r, "prompt token 1");
  r = ok;
  r.prompt[1] = -1;
  expect_invalid(r, "prompt token 1");
  r = ok;
  r.max_tokens = 0;
  expect_invalid(r, "max_tokens must be >= 1, got 0");
  r = ok;
  r.sampling.temperature = -1;
  expect_invalid(r, "temperature");
  r = ok;
  r.sampling.top_p = 0;
  expect_invalid(r, "top_p");
  r = ok;
  r.stop = {"x", ""};
  expect_invalid(r, "stop[1]");
  r = ok;
  r.stop_ids = {40000};
  expect_invalid(r, "stop_ids[0]");
  r = ok;
  r.timeout_s = -1;
  expect_invalid(r, "timeout_s");
  r = ok;
  r.sampling.logit_bias = {{5, 1.0f}, {32000, -100.0f}};
  expect_invalid(r, "logit_bias");
  r = ok;
  r.sampling.logit_bias = {{5, 101.0f}};
  expect_invalid(r, "logit_bias[\"5\"]");
  // The engine still serves after all that.
  r = ok;
  r.sampling.temperature = 0;
  r.max_tokens = 3;
  check_against_reference(*engine, {r});
}

TEST_CASE("engine: load() refuses a cache smaller than one sequence", "[engine]") {
  EngineOptions o = small_options();
  o.num_kv_blocks = 9;  // max_model_len 160 needs 10 blocks of 16
  try {
    Engine::load(model_dir(), o);
    FAIL("no exception");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("num_kv_blocks"));
  }
}

TEST_CASE("engine: prompt + max_tokens beyond max_model_len ends with kLength", "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  std::mt19937 rng(13);
  EngineRequest r;
  r.prompt = random_prompt(rng, kMaxModelLen - 10);
  r.max_tokens = 100;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  check_against_reference(*engine, {r});
  Collected c;
  engine->submit(r, c.callback());
  c.wait();
  CHECK(c.final_event.finish == EngineFinish::kLength);
  CHECK(static_cast<int64_t>(r.prompt.size() + c.tokens.size()) == kMaxModelLen);
}

TEST_CASE("engine: begin_shutdown refuses new work, in-flight work completes", "[engine]") {
  auto engine = Engine::load(model_dir(), small_options());
  EngineRequest r;
  r.prompt = {5, 6, 7, 8};
  r.max_tokens = 20;
  r.ignore_eos = true;
  Collected c;
  engine->submit(r, c.callback());
  engine->begin_shutdown();
  CHECK_FALSE(engine->stats().accepting);
  try {
    engine->submit(r, {});
    FAIL("no exception");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kUnavailable);
  }
  c.wait();
  CHECK(c.final_event.finish == EngineFinish::kLength);
  CHECK(c.tokens.size() == 20);
}

TEST_CASE("engine: destructor cancels requests in flight", "[engine]") {
  std::vector<std::unique_ptr<Collected>> got;
  {
    EngineOptions o = small_options();
    o.max_running = 4;
    auto engine = Engine::load(model_dir(), o);
    engine->set_step_observer([](const StepStats&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
    std::vector<EngineRequest> reqs = make_requests(10, 99);
    for (EngineRequest& r : reqs) {
      r.max_tokens = 100;
      r.ignore_eos = true;
      got.push_back(std::make_unique<Collected>());
      engine->submit(r, got.back()->callback());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& g : got) {
    CHECK(g->n_final == 1);
    CHECK(g->final_event.finish == EngineFinish::kCancelled);
  }
}

// A quantized KV cache: the engine (paged, batched, chunked) writes and reads the same quantized
// rows as CausalLm with the same format, so greedy outputs match token for token.
TEST_CASE("engine: a failing forward ends that step's requests with kError, then serves on",
          "[engine]") {
  // Every 4th forward throws (the fault-injection hook). With few KV blocks the scheduler also
  // preempts, so failures land on fresh, decoding and recomputed sequences alike.
  EngineOptions o = small_options();
  o.test_fault_every_n_steps = 4;
  o.block_size = 16;
  o.num_kv_blocks = 10;
  auto engine = Engine::load(model_dir(), o);
  std::vector<EngineRequest> reqs = make_requests(12, 77);
  std::vector<std::unique_ptr<Collected>> got;
  for (const EngineRequest& r : reqs) {
    got.push_back(std::make_unique<Collected>());
    engine->submit(r, got.back()->callback());
  }
  int n_error = 0, n_ok = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    got[i]->wait();
    INFO("request " << i);
    CHECK(got[i]->n_final == 1);  // exactly one final event, whatever happened
    const EngineEvent& fin = got[i]->final_event;
    if (fin.finish == EngineFinish::kError) {
      ++n_error;
      CHECK(fin.error.find("injected fault") != std::string::npos);
    } else {
      ++n_ok;
      // A request that never met a failing step is unaffected by the others' failures.
      const Expected want = run_reference(reqs[i]);
      CHECK(got[i]->tokens == want.tokens);
    }
  }
  CHECK(n_error > 0);
  CHECK(n_ok > 0);
  REQUIRE(engine->wait_idle(std::chrono::seconds(30)));
  CHECK(engine->stats().kv_blocks_used == 0);  // failed requests gave their blocks back
  CHECK(engine->stats().running == 0);
}

TEST_CASE("engine: int8 and int4 KV caches equal generate() with the same format", "[engine]") {
  for (KvDtype kv : {KvDtype::kI8, KvDtype::kI4}) {
    INFO("kv_cache_dtype " << kv_dtype_name(kv));
    EngineOptions o = small_options();
    o.build.kv_cache_dtype = kv;
    o.block_size = 7;
    o.max_batched_tokens = 40;  // chunked prefills mixed with decodes
    auto engine = Engine::load(model_dir(), o);
    check_against_reference(*engine, make_requests(12, 500 + static_cast<uint32_t>(kv)));
  }
}

// The block budget follows the format's row size: the serve model has 2 layers of 2 KV heads of
// 16, so a token row of K (or V) is 2 x 64 bytes in f32, 2 x (16 + 4) in int8 and 2 x (8 + 4) in
// int4 (one group per head of 16: an f16 scale and minimum) — 3.2x and 5.3x the blocks (for the
// usual head_dim 128: 3.9x and 6.4x).
TEST_CASE("engine: a quantized KV cache fits more blocks in kv_cache_bytes", "[engine]") {
  const int64_t kBytes = 4 << 20, kBlock = 16;
  std::map<KvDtype, int64_t> blocks;
  for (auto [kv, row] : std::vector<std::pair<KvDtype, int64_t>>{
           {KvDtype::kF32, 128}, {KvDtype::kBF16, 64}, {KvDtype::kI8, 40},
           {KvDtype::kF8E4M3, 40}, {KvDtype::kI4, 24}}) {
    INFO("kv_cache_dtype " << kv_dtype_name(kv));
    EngineOptions o = small_options();
    o.build.kv_cache_dtype = kv;
    o.num_kv_blocks = 0;
    o.kv_cache_bytes = kBytes;
    o.block_size = kBlock;
    auto engine = Engine::load(model_dir(), o);
    REQUIRE(engine->model_info().n_layer == 2);
    REQUIRE(engine->model_info().n_head_kv == 2);
    REQUIRE(engine->model_info().head_dim == 16);
    blocks[kv] = engine->stats().kv_blocks_total;
    // K and V, 2 layers, kBlock rows per block.
    CHECK(blocks[kv] == kBytes / (2 * 2 * kBlock * row));
  }
  CHECK(blocks[KvDtype::kI8] > 3 * blocks[KvDtype::kF32]);
  CHECK(blocks[KvDtype::kI4] > 5 * blocks[KvDtype::kF32]);
}

// CausalLm's single-block cache holds the format's real bytes.
TEST_CASE("causal_lm: kv_cache_bytes reports the quantized size", "[engine]") {
  for (auto [kv, row] : std::vector<std::pair<KvDtype, int64_t>>{
           {KvDtype::kF32, 128}, {KvDtype::kI8, 40}, {KvDtype::kI4, 24}}) {
    INFO("kv_cache_dtype " << kv_dtype_name(kv));
    CHECK(reference(kv).lm->kv_cache_bytes() == 2 * 2 * kMaxModelLen * row);
  }
}
