// Whole-model helpers of the CUDA tests that load models (test_cuda_e2e, test_cuda_graphs): the
// model directories, token ids, and a collector of one Engine request's events. Header-only, on
// top of cuda_test_util.h, so the op tests do not pull in the runtime.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/causal_lm.h"
#include "engine/runtime/engine.h"
#include "tests/cuda/cuda_test_util.h"

namespace sampan::cuda_test {

// tests/data/models/<name>: the tiny reference models (tiny_llama3, tiny_qwen2, tiny_mistral).
inline std::string tiny_model(const std::string& name) {
  return std::string(SAMPAN_SOURCE_DIR) + "/tests/data/models/" + name;
}

// The serve model of test_engine (it has a tokenizer, which the Engine needs), made once into
// <build>/<dir_name> by tests/reference/make_serve_model.py (idempotent, safe in parallel).
inline std::string make_serve_model(const std::string& dir_name) {
  const std::string out = std::string(SAMPAN_BINARY_DIR) + "/" + dir_name;
  const std::string cmd = "python3 " + std::string(SAMPAN_SOURCE_DIR) +
                          "/tests/reference/make_serve_model.py --out " + out;
  REQUIRE(std::system(cmd.c_str()) == 0);
  return out;
}

// n ids uniform in [3, vocab): 0..2 are bos/eos/pad, which the tiny models treat like any other
// id anyway.
inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = d(rng);
  return ids;
}

// Everything one Engine request sent.
struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  bool finished = false;
  runtime::EngineFinish finish = runtime::EngineFinish::kLength;
  std::string error;

  runtime::EventCallback callback() {
    return [this](const runtime::EngineEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.token >= 0) tokens.push_back(ev.token);
      if (ev.finished) {
        finished = true;
        finish = ev.finish;
        error = ev.error;
        cv.notify_all();
      }
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(120), [this] { return finished; }));
  }
};

// Greedy continuations of `prompt`: `want` from the CPU, `got` from the GPU. Equal token for
// token, or equal up to a first difference at which the CPU itself nearly ties (near_tie: fed
// the prompt and the common prefix, the CPU's logits of its own token and of the GPU's lie
// within kNearTie times the rms of that row's GPU-minus-CPU difference). After such a step the
// two continuations are different texts and are not compared further. `cpu` and `gpu` hold the
// same model on the two devices; both are reset.
inline void expect_same_greedy(runtime::CausalLm& cpu, runtime::CausalLm& gpu,
                               const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& want, const std::vector<int32_t>& got) {
  REQUIRE(got.size() == want.size());
  size_t p = 0;
  while (p < want.size() && got[p] == want[p]) ++p;
  if (p == want.size()) return;
  std::vector<int32_t> ctx = prompt;
  ctx.insert(ctx.end(), want.begin(), want.begin() + static_cast<std::ptrdiff_t>(p));
  const int64_t vocab = cpu.config().vocab_size;
  cpu.reset();
  gpu.reset();
  const Tensor a = cpu.forward(ctx, false);
  const Tensor b = gpu.forward(ctx, false);
  REQUIRE(a.device() == Device::cpu());
  REQUIRE(b.device() == Device::cpu());
  const float* x = a.data<float>();
  INFO("greedy tokens differ first at step " << p << " of " << want.size() << ": cpu " << want[p]
       << " (logit " << x[want[p]] << "), cuda " << got[p] << " (cpu logit " << x[got[p]] << ")");
  // Both choices lie within the noise of the maximum of the CPU's logits, recomputed here in one
  // prefill (the CPU's own prefill and decode paths differ in the last bits too, so its own
  // choice need not be this recomputation's argmax at a near tie, only close to it).
  CHECK(near_tie(x, b.data<float>(), vocab, want[p]));
  CHECK(near_tie(x, b.data<float>(), vocab, got[p]));
  cpu.reset();
  gpu.reset();
}

}  // namespace sampan::cuda_test
