// Offline throughput of the serving Engine (continuous batching over the paged KV cache).
//
//   bench_engine MODEL_DIR [--threads T] [--prompt 128] [--gen 128] [--concurrency 1,4,16,64]
//                          [--tokenizer-dir DIR] [--temperature 0] [--top-p 1]
//
// For each concurrency N: N requests of `prompt` random ids and `gen` output tokens (greedy, or
// sampled with --temperature / --top-p and a seed per request; ignore_eos) submitted at once;
// reports output tokens/s over the whole run, mean step time, mean time of the pure-decode steps
// (every sequence decoding) and their batch size, and the mean time per step spent after the
// forward (host sampling, detokenizing, events: "output ms"). For comparison: single-sequence
// CausalLm decode tok/s after the same prompt. The curve shows whether decoding N sequences costs
// far less than N single steps (weights streamed once per step, not once per sequence).
//
// Wall-clock figures need an otherwise idle machine; the CPU-time columns (process CPU seconds,
// all threads) stay meaningful on a shared one, best with --threads 1.
//
// MODEL_DIR needs tokenizer.json; bench/make_synthetic_model.py writes none, so pass
// --tokenizer-dir (e.g. tests/data/tokenizers/llama-spm, TinyLlama's vocabulary) and a scratch
// directory of links is used instead.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

#include "engine/core/error.h"
#include "engine/runtime/causal_lm.h"
#include "engine/runtime/engine.h"

using namespace sampan;
using namespace sampan::runtime;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Args {
  std::string model_dir;
  std::string tokenizer_dir;
  int threads = 0;
  int64_t prompt = 128;
  int64_t gen = 128;
  std::vector<int> concurrency = {1, 4, 16, 64};
  float temperature = 0.0f;
  float top_p = 1.0f;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--threads") {
      a.threads = std::stoi(next());
    } else if (s == "--prompt") {
      a.prompt = std::stoll(next());
    } else if (s == "--gen") {
      a.gen = std::stoll(next());
    } else if (s == "--tokenizer-dir") {
      a.tokenizer_dir = next();
    } else if (s == "--temperature") {
      a.temperature = std::stof(next());
    } else if (s == "--top-p") {
      a.top_p = std::stof(next());
    } else if (s == "--concurrency") {
      a.concurrency.clear();
      std::string v = next();
      size_t p = 0;
      while (p < v.size()) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        a.concurrency.push_back(std::stoi(v.substr(p, q - p)));
        p = q + 1;
      }
    } else if (s.rfind("--", 0) == 0) {
      std::fprintf(stderr, "unknown option %s\n", s.c_str());
      std::exit(2);
    } else {
      a.model_dir = s;
    }
  }
  if (a.model_dir.empty()) {
    std::fprintf(stderr, "usage: bench_engine MODEL_DIR [--threads T] [--prompt N] [--gen N] "
                         "[--concurrency 1,4,16,64] [--tokenizer-dir DIR] [--temperature T] "
                         "[--top-p P]\n");
    std::exit(2);
  }
  return a;
}

// The model directory, or a scratch one linking its files and a tokenizer.json from elsewhere.
std::string with_tokenizer(const Args& a) {
  if (fs::exists(fs::path(a.model_dir) / "tokenizer.json")) return a.model_dir;
  if (a.tokenizer_dir.empty()) {
    std::fprintf(stderr, "%s has no tokenizer.json: pass --tokenizer-dir\n", a.model_dir.c_str());
    std::exit(2);
  }
  const fs::path dir = fs::temp_directory_path() / ("bench_engine_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(a.model_dir)) {
    fs::create_symlink(fs::absolute(e.path()), dir / e.path().filename());
  }
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    const fs::path src = fs::path(a.tokenizer_dir) / f;
    if (fs::exists(src) && !fs::exists(dir / f)) fs::create_symlink(fs::absolute(src), dir / f);
  }
  return dir.string();
}

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct Row {
  int n = 0;
  double seconds = 0, tok_s = 0, mean_step_ms = 0, decode_step_ms = 0, decode_batch = 0;
  double output_ms = 0;  // mean time per step after the forward (sampling, events)
  double cpu_s = 0, cpu_tok_s = 0;  // process CPU time of the run; output tokens per CPU second
  int64_t steps = 0;
};

Row run_engine(const std::string& dir, const Args& a, int n) {
  EngineOptions o;
  o.threads = a.threads;
  o.max_model_len = a.prompt + a.gen + 1;
  o.max_running = std::max(n, 1);
  o.block_size = 16;
  o.num_kv_blocks = n * ((o.max_model_len + 15) / 16) + 1;
  o.max_waiting = n + 1;
  o.prefix_cache = false;  // random prompts share nothing; measure the plain path
  auto engine = Engine::load(dir, o);
  std::mutex mu;
  double step_s = 0, decode_s = 0, decode_seqs = 0, output_s = 0;
  int64_t steps = 0, decode_steps = 0;
  engine->set_step_observer([&](const StepStats& s) {
    step_s += s.seconds;
    output_s += s.output_seconds;
    ++steps;
    if (s.n_decode == s.n_sequences) {
      decode_s += s.seconds;
      decode_seqs += s.n_sequences;
      ++decode_steps;
    }
  });
  std::mt19937 rng(42);
  std::condition_variable cv;
  int done = 0;
  int64_t generated = 0;
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (int i = 0; i < n; ++i) {
    EngineRequest r;
    r.prompt = random_ids(rng, a.prompt, engine->model_info().vocab_size);
    r.max_tokens = a.gen;
    r.ignore_eos = true;
    r.sampling.temperature = a.temperature;
    r.sampling.top_p = a.top_p;
    r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    engine->submit(std::move(r), [&](const EngineEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.token >= 0) ++generated;
      if (ev.finished) {
        ++done;
        cv.notify_all();
      }
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == n; });
  }
  Row r;
  r.n = n;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.cpu_s = cpu_seconds() - c0;
  engine.reset();
  r.cpu_tok_s = static_cast<double>(generated) / r.cpu_s;
  r.tok_s = static_cast<double>(generated) / r.seconds;
  r.steps = steps;
  r.mean_step_ms = steps ? 1e3 * step_s / static_cast<double>(steps) : 0;
  r.output_ms = steps ? 1e3 * output_s / static_cast<double>(steps) : 0;
  r.decode_step_ms = decode_steps ? 1e3 * decode_s / static_cast<double>(decode_steps) : 0;
  r.decode_batch = decode_steps ? decode_seqs / static_cast<double>(decode_steps) : 0;
  return r;
}

struct Single {
  double tok_s = 0, cpu_tok_s = 0;
};

Single single_sequence_decode(const std::string& dir, const Args& a) {
  CausalLmOptions o;
  o.threads = a.threads;
  o.max_context = a.prompt + a.gen + 1;
  auto lm = CausalLm::load(dir, o);
  std::mt19937 rng(7);
  const std::vector<int32_t> prompt = random_ids(rng, a.prompt, lm->config().vocab_size);
  lm->forward(prompt, false);
  int32_t id = 5;
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  for (int64_t i = 0; i < a.gen; ++i) {
    Tensor logits = lm->forward(std::span<const int32_t>(&id, 1), false);
    const float* p = logits.data<float>();
    id = static_cast<int32_t>(std::max_element(p, p + lm->config().vocab_size) - p);
  }
  const double gen = static_cast<double>(a.gen);
  return {gen / std::chrono::duration<double>(Clock::now() - t0).count(),
          gen / (cpu_seconds() - c0)};
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    const std::string dir = with_tokenizer(a);
    const Single single_run = single_sequence_decode(dir, a);
    const double single = single_run.tok_s;
    std::printf("single-sequence CausalLm decode: %.2f tok/s (%.1f ms/token), %.2f tok per CPU s\n",
                single, 1e3 / single, single_run.cpu_tok_s);
    std::printf("%6s %10s %12s %8s %14s %16s %10s %14s %14s %10s\n", "N", "seconds", "out tok/s",
                "steps", "mean step ms", "decode step ms", "decode N", "vs N singles",
                "tok/CPU s", "output ms");
    std::fflush(stdout);
    std::vector<Row> rows;
    for (int n : a.concurrency) {
      rows.push_back(run_engine(dir, a, n));
      const Row& r = rows.back();
      // How much cheaper one batched decode step is than r.decode_batch single-sequence steps.
      const double vs = r.decode_step_ms > 0 ? (r.decode_batch * 1e3 / single) / r.decode_step_ms : 0;
      std::printf("%6d %10.2f %12.2f %8lld %14.2f %16.2f %10.1f %13.2fx %14.2f %10.3f\n", r.n,
                  r.seconds, r.tok_s, static_cast<long long>(r.steps), r.mean_step_ms,
                  r.decode_step_ms, r.decode_batch, vs, r.cpu_tok_s, r.output_ms);
      std::fflush(stdout);  // rows appear as they finish: long runs on a busy machine
    }
    std::printf("{\"bench\":\"engine\",\"prompt\":%lld,\"gen\":%lld,\"threads\":%d,"
                "\"temperature\":%g,\"top_p\":%g,"
                "\"single_decode_tok_s\":%.3f,\"single_decode_tok_per_cpu_s\":%.3f,\"runs\":[",
                static_cast<long long>(a.prompt), static_cast<long long>(a.gen), a.threads,
                static_cast<double>(a.temperature), static_cast<double>(a.top_p), single,
                single_run.cpu_tok_s);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("%s{\"n\":%d,\"out_tok_s\":%.3f,\"mean_step_ms\":%.3f,\"decode_step_ms\":%.3f,"
                  "\"output_ms\":%.3f,\"seconds\":%.3f,\"out_tok_per_cpu_s\":%.3f}",
                  i ? "," : "", r.n, r.tok_s, r.mean_step_ms, r.decode_step_ms, r.output_ms,
                  r.seconds, r.cpu_tok_s);
    }
    std::printf("]}\n");
    if (dir != a.model_dir) fs::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine: %s\n", e.what());
    return 1;
  }
  return 0;
}
