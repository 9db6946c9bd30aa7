// sampan bench --model DIR [--prompt-len 512] [--gen 32] [--threads N] [--repeat 3]
//              [--device cpu|cuda[:N]] [--batch 1,4,8,16 [--batch-prompt-len 32]]
// Prefill and decode throughput of the CPU forward pass, printed as one JSON line. Weight bytes
// streamed per decoded token are reported so bench/run_cpu_bench.sh can relate decode speed to
// the machine's measured read bandwidth. --batch adds batched decode as the server runs it: B
// requests decode together in the continuous-batching engine, and the median time of the steps
// that decode all B of them is reported per B (a step reads the weights once for all rows, so
// the ideal is the same step time at every B). The requests reach the engine one by one, so the
// first steps may admit them in turn: a run has at least gen - B steps decoding all B (gen - 1
// when all are admitted in one step). When the B prompts outgrow one step's token budget
// (512 or --batch-prompt-len) and take P steps to prefill, each request decodes P more tokens,
// so that all B still share about gen - 1 steps.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/runtime/causal_lm.h"
#include "engine/runtime/engine.h"

#include "server/commands.h"
#include "server/op_profile.h"
#include "server/model_flags.h"

namespace sampan::cli {
namespace {

struct BatchFigure {
  int batch = 0;
  double step_s = 0;  // median wall time of a step decoding all `batch` sequences
  int64_t steps = 0;  // such steps measured
};

// Runs `batches` one after another on one engine: B requests of `prompt_len` random ids, each
// decoding `gen` tokens (greedy, eos ignored), all submitted at once.
std::vector<BatchFigure> bench_batches(const std::string& model, const std::vector<int>& batches,
                                       int64_t prompt_len, int64_t gen, int threads,
                                       const models::ModelBuildOptions& build,
                                       const Device& device, bool cuda_graphs) {
  const int max_b = *std::max_element(batches.begin(), batches.end());
  runtime::EngineOptions eo;
  eo.threads = threads;
  eo.max_batched_tokens = std::max<int64_t>(512, prompt_len);
  // B prompts that do not fit one step's token budget are prefilled over several steps while
  // the first ones already decode: each request then decodes that many tokens more, so that the
  // last one to start still shares about gen - 1 steps with all the others (with --gen 4 and 8
  // prompts of 512 tokens no step decoded all 8 before). Prompts that fit one step: no extra.
  auto extra_tokens = [&](int b) -> int64_t {
    const int64_t steps = (b * prompt_len + eo.max_batched_tokens - 1) / eo.max_batched_tokens;
    return steps > 1 ? steps : 0;
  };
  const int64_t max_extra = extra_tokens(max_b);
  eo.max_model_len = prompt_len + gen + max_extra + 1;
  eo.max_running = max_b;
  eo.prefix_cache = false;
  eo.build = build;
  eo.device = device;
  eo.cuda_graphs = cuda_graphs;
  eo.num_kv_blocks =
      max_b * ((prompt_len + gen + max_extra + 1 + eo.block_size - 1) / eo.block_size + 1);
  auto engine = runtime::Engine::load(model, eo);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<double> times;
  int want = 0;      // B of the run in progress
  int finished = 0;  // its requests that got their final event
  bool done = false;  // the step that finished the last of them has been observed
  // Final events come during a step, the observer after it: waiting for the observer of the
  // step that finished the last request (not for wait_idle) keeps that step's time.
  engine->set_step_observer([&](const runtime::StepStats& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (s.n_decode == want && s.n_sequences == s.n_decode) times.push_back(s.seconds);
    if (want > 0 && finished == want && !done) {
      done = true;
      cv.notify_all();
    }
  });
  std::mt19937 rng(4321);
  std::uniform_int_distribution<int32_t> dist(
      0, static_cast<int32_t>(engine->model_info().vocab_size - 1));
  std::vector<BatchFigure> out;
  for (int b : batches) {
    int failed = 0;
    std::string error;
    // Held while the b requests are submitted: the step observer (engine thread, after each
    // step, outside the engine's own lock) waits for it, so every request is queued before the
    // engine's second step. Submitted one by one while the engine steps, a loaded machine could
    // spread their admission over several steps and leave fewer all-B steps than the run has.
    std::unique_lock<std::mutex> lock(mu);
    times.clear();
    want = b;
    finished = 0;
    done = false;
    for (int i = 0; i < b; ++i) {
      runtime::EngineRequest r;
      r.id = fmt::format("bench-{}-{}", b, i);
      r.prompt.resize(static_cast<size_t>(prompt_len));
      for (auto& t : r.prompt) t = dist(rng);
      r.sampling.temperature = 0;
      r.sampling.logprobs = false;
      r.max_tokens = gen + extra_tokens(b);
      r.ignore_eos = true;
      engine->submit(std::move(r), [&](const runtime::EngineEvent& e) {
        if (!e.finished) return;
        std::lock_guard<std::mutex> lock(mu);
        ++finished;
        if (e.finish == runtime::EngineFinish::kError) {
          error = e.error;
          ++failed;
        }
      });
    }
    if (!cv.wait_for(lock, std::chrono::hours(1), [&] { return done; })) {
      throw Error(ErrorCode::kInternal, fmt::format("bench --batch {}: the engine did not finish", b));
    }
    if (failed > 0) throw Error(ErrorCode::kInternal, fmt::format("bench --batch {}: {}", b, error));
    if (times.empty()) {
      throw Error(ErrorCode::kInternal,
                  fmt::format("bench --batch {}: no step decoded all {} sequences", b, b));
    }
    want = 0;
    std::vector<double> t = times;
    std::sort(t.begin(), t.end());
    out.push_back({b, t[t.size() / 2], static_cast<int64_t>(t.size())});
  }
  return out;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  struct Args {
    std::string model;
    int64_t prompt_len = 512, gen = 32;
    int threads = 0, repeat = 3;
    models::ModelBuildOptions build;
    Device device;
    bool cuda_graphs = true;
    std::vector<int> batch;
    int64_t batch_prompt_len = 32;
    bool profile = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens/s (one JSON line)");
  cmd->add_option("--model", a->model, "model directory or .gguf file")->required();
  cmd->add_option("--prompt-len", a->prompt_len, "prompt tokens for prefill")->check(CLI::PositiveNumber);
  cmd->add_option("--gen", a->gen, "decoded tokens")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", a->threads, "CPU threads")->check(CLI::NonNegativeNumber);
  cmd->add_option("--repeat", a->repeat, "repetitions (best is reported)")->check(CLI::PositiveNumber);
  add_model_build_flags(*cmd, &a->build);
  add_device_flag(*cmd, &a->device);
  add_cuda_graphs_flag(*cmd, &a->cuda_graphs);
  cmd->add_option("--batch", a->batch,
                  "also measure batched decode in the serving engine at these batch sizes "
                  "(comma-separated, e.g. 1,4,8,16)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  cmd->add_option("--batch-prompt-len", a->batch_prompt_len,
                  "prompt tokens of each request in the --batch runs")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--profile", a->profile,
                "after the timed runs, decode --gen tokens once more with per-node timing and "
                "print the time per op type per token to stderr (CPU)");
  return [a] {
    using Clock = std::chrono::steady_clock;
    runtime::CausalLmOptions opt;
    opt.threads = a->threads;
    opt.max_context = a->prompt_len + a->gen;
    opt.build = a->build;
    opt.device = a->device;
    opt.cuda_graphs = a->cuda_graphs;
    auto lm = runtime::CausalLm::load(a->model, opt);
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(lm->config().vocab_size - 1));
    std::vector<int32_t> prompt(static_cast<size_t>(a->prompt_len));
    for (auto& t : prompt) t = dist(rng);
    double best_prefill = 1e30, best_decode = 1e30;
    for (int r = 0; r < a->repeat; ++r) {
      lm->reset();
      auto t0 = Clock::now();
      Tensor logits = lm->forward(prompt, false);
      auto t1 = Clock::now();
      int32_t next = dist(rng);
      for (int64_t i = 0; i < a->gen; ++i) {
        logits = lm->forward(std::span<const int32_t>(&next, 1), false);
        next = dist(rng);
      }
      auto t2 = Clock::now();
      best_prefill = std::min(best_prefill, std::chrono::duration<double>(t1 - t0).count());
      best_decode = std::min(best_decode, std::chrono::duration<double>(t2 - t1).count());
    }
    if (a->profile) {
      // An extra, untimed pass: timing every node costs two clock reads per node.
      lm->reset();
      lm->forward(prompt, false);
      const std::vector<double> before = lm->node_seconds();
      lm->set_profiling(true);
      int32_t next = dist(rng);
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < a->gen; ++i) {
        lm->forward(std::span<const int32_t>(&next, 1), false);
        next = dist(rng);
      }
      const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
      lm->set_profiling(false);
      std::vector<double> decode = lm->node_seconds();
      for (size_t i = 0; i < decode.size() && i < before.size(); ++i) decode[i] -= before[i];
      fmt::print(stderr, "decode, profiled: {:.3f} ms per token (wall)\n", wall * 1e3 / a->gen);
      print_op_profile(stderr, lm->graph(), decode, a->gen, "token");
    }
    // Per decoded token every matrix is read once; the embedding reads one row (negligible).
    const HfConfig& c = lm->config();
    // Bytes a decode step streams: every constant a linear node reads (weights, scales, zero
    // points, biases) — the graph's, so on-load quantization and rotation count as they run.
    int64_t streamed = 0;
    {
      const graph::Graph& g = lm->graph();
      std::set<graph::ValueId> seen;
      for (const graph::Node& n : g.nodes()) {
        if (n.dead || n.op != "linear") continue;
        for (graph::ValueId v : n.inputs) {
          if (v == graph::kNoValue || !seen.insert(v).second) continue;
          const graph::Value& val = g.value(v);
          if (val.kind == graph::ValueKind::kConstant) streamed += val.constant.nbytes();
        }
      }
    }
    (void)c;
    const std::string device_str = lm->device().str();
    const int threads_used = lm->threads();
    std::string batch_json;
    if (!a->batch.empty()) {
      const int threads = lm->threads();
      const Device device = lm->device();
      lm = nullptr;  // one copy of the weights in memory at a time
      const std::vector<BatchFigure> figs =
          bench_batches(a->model, a->batch, a->batch_prompt_len, a->gen, threads, a->build,
                        device, a->cuda_graphs);
      double base = 0;
      for (const BatchFigure& f : figs) {
        if (f.batch == 1) base = f.step_s;
      }
      batch_json = ", \"batch_prompt_len\": " + std::to_string(a->batch_prompt_len) +
                   ", \"batch_decode\": [";
      for (size_t i = 0; i < figs.size(); ++i) {
        const BatchFigure& f = figs[i];
        batch_json += fmt::format(
            "{}{{\"batch\": {}, \"step_s\": {:.7f}, \"tok_s\": {:.2f}, \"steps\": {}{}}}",
            i ? ", " : "", f.batch, f.step_s, f.batch / f.step_s, f.steps,
            base > 0 ? fmt::format(", \"step_vs_batch1\": {:.3f}", f.step_s / base) : "");
      }
      batch_json += "]";
    }
    fmt::print(
        "{{\"model\": \"{}\", \"device\": \"{}\", \"threads\": {}, \"isa\": \"{}\", "
        "\"prompt_len\": {}, \"gen\": {}, "
        "\"prefill_s\": {:.4f}, \"prefill_tok_s\": {:.2f}, \"decode_s\": {:.4f}, "
        "\"decode_tok_s\": {:.3f}, \"decode_bytes_per_token\": {}, \"decode_gb_s\": {:.3f}{}}}\n",
        a->model, device_str, threads_used, cpu_isa(),
        a->prompt_len, a->gen,
        best_prefill, a->prompt_len / best_prefill, best_decode, a->gen / best_decode, streamed,
        streamed * (a->gen / best_decode) / 1e9, batch_json);
    return 0;
  };
}

}  // namespace sampan::cli
