// Whole-model helpers of the CUDA tests that load models (test_cuda_e2e, test_cuda_graphs): the
// model directories, token ids, and a collector of one Engine request's events. Header-only, on
// top of cuda_test_util.h, so the op tests do not pull in the runtime.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

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

}  // namespace sampan::cuda_test
