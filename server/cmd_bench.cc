// sampan bench --model DIR [--prompt-len 512] [--gen 32] [--threads N] [--repeat 3]
//              [--device cpu|cuda[:N]]
// Prefill and decode throughput of the CPU forward pass, printed as one JSON line. Weight bytes
// streamed per decoded token are reported so bench/run_cpu_bench.sh can relate decode speed to
// the machine's measured read bandwidth.
#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>

#include "engine/runtime/causal_lm.h"
#include <set>

#include "server/commands.h"
#include "server/model_flags.h"

namespace sampan::cli {

Runner add_bench(CLI::App& app) {
  struct Args {
    std::string model;
    int64_t prompt_len = 512, gen = 32;
    int threads = 0, repeat = 3;
    models::ModelBuildOptions build;
    Device device;
    bool cuda_graphs = true;
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
    fmt::print(
        "{{\"model\": \"{}\", \"device\": \"{}\", \"threads\": {}, \"isa\": \"{}\", "
        "\"prompt_len\": {}, \"gen\": {}, "
        "\"prefill_s\": {:.4f}, \"prefill_tok_s\": {:.2f}, \"decode_s\": {:.4f}, "
        "\"decode_tok_s\": {:.3f}, \"decode_bytes_per_token\": {}, \"decode_gb_s\": {:.3f}}}\n",
        a->model, lm->device().str(), lm->threads(), cpu_isa(),
        a->prompt_len, a->gen,
        best_prefill, a->prompt_len / best_prefill, best_decode, a->gen / best_decode, streamed,
        streamed * (a->gen / best_decode) / 1e9);
    return 0;
  };
}

}  // namespace sampan::cli
