// sampan eval --model DIR --text FILE [--ref-model DIR] [--ctx 512] [--max-tokens N]
//             [--threads N] [--json FILE] [model build flags: --quantization, --hadamard, ...]
//
// Accuracy of a model (typically quantized and/or rotated on load) against a reference on a
// text: perplexity of both, mean and max KL(P_ref || P_model), and top-1 agreement.
//
// Method (docs/QUANTIZATION.md repeats it; tests/e2e/test_eval.py recomputes it in numpy):
//  * The text is tokenized as the model's tokenizer does with its special tokens (BOS when the
//    tokenizer adds one) and cut to the first --max-tokens ids.
//  * Windows: without BOS, consecutive non-overlapping slices of ctx ids. With BOS, every window
//    is BOS followed by the next ctx-1 text ids, so each window starts the way a sequence
//    does (a model's first position behaves differently). The last, shorter window is kept if
//    it holds at least 2 ids.
//  * Each window is one all-logits forward from an empty cache. Only the second half of a
//    window of L ids is scored: targets at positions L - L/2 .. L-1, each predicted by the logits
//    of the position before. Every scored token thus sees at least half a window of context, so
//    the figures describe the model at context, not its first few tokens.
//  * Log-softmax, NLL and KL are computed in f64 from the f32 logits.
// The reference is --ref-model loaded without build flags, or without --ref-model the same dir
// loaded without build flags (and without --lora) (when no build flag is given either, the model is its own
// reference and is run once).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/models/lora_adapter.h"
#include "engine/runtime/causal_lm.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/commands.h"
#include "server/model_flags.h"

namespace sampan::cli {
namespace {

struct EvalArgs {
  std::string model, text, ref_model, json;
  int64_t ctx = 512;
  int64_t max_tokens = 0;
  int threads = 0;
  models::ModelBuildOptions build;
  Device device;
  std::string lora;  // --lora DIR: the adapter applied to --model (the reference runs without it)
};

// Sums over every scored token.
struct EvalTotals {
  int64_t scored = 0;
  double nll_model = 0, nll_ref = 0;
  double kl_sum = 0, kl_max = 0;
  int64_t top1_agree = 0;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SAMPAN_CHECK(in.good(), ErrorCode::kNotFound, "--text {}: cannot open the file", path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SAMPAN_CHECK(!in.bad(), ErrorCode::kIo, "--text {}: read failed", path);
  return text;
}

bool is_default_build(const models::ModelBuildOptions& b) {
  const models::ModelBuildOptions d;
  return b.quantization.format == d.quantization.format && !b.hadamard.enabled &&
         b.kv_cache_dtype == d.kv_cache_dtype && !b.kv_hadamard && b.lora.empty();
}

std::string describe_build(const models::ModelBuildOptions& b) {
  std::string w = models::weight_format_name(b.quantization.format);
  if (b.quantization.format == models::WeightFormat::kInt4) {
    w += fmt::format(" g{} {} {}-scales", b.quantization.group_size,
                     b.quantization.symmetric ? "sym" : "asym", dtype_name(b.quantization.scale_dtype));
  }
  if (b.hadamard.enabled) w += fmt::format(" + hadamard (seed {})", b.hadamard.seed);
  std::string kv = kv_dtype_name(b.kv_cache_dtype);
  if (b.kv_hadamard) kv += " + kv-hadamard";
  std::string lora;
  for (const auto& l : b.lora) lora += fmt::format(", lora {}", l->dir);
  return fmt::format("weights {}, kv {}{}", w, kv, lora);
}

// Windows as described at the top of the file. ids: the tokenized text (BOS first if `bos`).
std::vector<std::vector<int32_t>> make_windows(const std::vector<int32_t>& ids, int64_t ctx,
                                               std::optional<int32_t> bos) {
  std::vector<std::vector<int32_t>> windows;
  const size_t body_begin = bos ? 1 : 0;
  const size_t step = static_cast<size_t>(bos ? ctx - 1 : ctx);
  for (size_t begin = body_begin; begin < ids.size(); begin += step) {
    const size_t end = std::min(ids.size(), begin + step);
    std::vector<int32_t> w;
    if (bos) w.push_back(*bos);
    w.insert(w.end(), ids.begin() + static_cast<std::ptrdiff_t>(begin),
             ids.begin() + static_cast<std::ptrdiff_t>(end));
    if (w.size() >= 2) windows.push_back(std::move(w));
  }
  return windows;
}

// out[i] = log_softmax(row)[i] in f64. row: [vocab]
void log_softmax_f64(const float* row, int64_t vocab, std::vector<double>& out) {
  out.resize(static_cast<size_t>(vocab));
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(row[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < vocab; ++i) out[static_cast<size_t>(i)] = static_cast<double>(row[i]) - lse;
}

int64_t argmax(const float* row, int64_t vocab) {
  return std::max_element(row, row + vocab) - row;
}

// Adds the scored positions of one window. model, ref: [L, vocab] logits of the window.
void score_window(const std::vector<int32_t>& window, const float* model, const float* ref,
                  int64_t vocab, EvalTotals& t) {
  const int64_t n = static_cast<int64_t>(window.size());
  std::vector<double> lp_m, lp_r;
  for (int64_t j = n - n / 2; j < n; ++j) {
    const float* m_row = model + (j - 1) * vocab;
    const float* r_row = ref + (j - 1) * vocab;
    log_softmax_f64(m_row, vocab, lp_m);
    log_softmax_f64(r_row, vocab, lp_r);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double lr = lp_r[static_cast<size_t>(i)];
      kl += std::exp(lr) * (lr - lp_m[static_cast<size_t>(i)]);
    }
    const auto target = static_cast<size_t>(window[static_cast<size_t>(j)]);
    t.nll_model -= lp_m[target];
    t.nll_ref -= lp_r[target];
    t.kl_sum += kl;
    t.kl_max = std::max(t.kl_max, kl);
    t.top1_agree += argmax(m_row, vocab) == argmax(r_row, vocab) ? 1 : 0;
    t.scored += 1;
  }
}

Tensor window_logits(runtime::CausalLm& lm, const std::vector<int32_t>& window) {
  lm.reset();
  return lm.forward(std::span<const int32_t>(window.data(), window.size()), true);
}

int run_eval(const EvalArgs& a) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  SAMPAN_CHECK(a.ctx >= 2, ErrorCode::kInvalidArgument, "--ctx {}: must be at least 2", a.ctx);
  SAMPAN_CHECK(a.max_tokens == 0 || a.max_tokens >= 2, ErrorCode::kInvalidArgument,
               "--max-tokens {}: must be at least 2", a.max_tokens);
  const std::string text = read_text_file(a.text);
  SAMPAN_CHECK(!text.empty(), ErrorCode::kInvalidArgument, "--text {}: the file is empty", a.text);

  auto tokenizer = tok::load_tokenizer(a.model);
  std::vector<int32_t> ids = tokenizer->encode(text, true);
  const tok::SpecialTokens& sp = tokenizer->special();
  std::optional<int32_t> bos;
  if (sp.bos && !ids.empty() && ids.front() == *sp.bos && sp.add_bos) bos = sp.bos;
  if (a.max_tokens > 0 && static_cast<int64_t>(ids.size()) > a.max_tokens) {
    ids.resize(static_cast<size_t>(a.max_tokens));
  }
  const std::vector<std::vector<int32_t>> windows = make_windows(ids, a.ctx, bos);
  SAMPAN_CHECK(!windows.empty(), ErrorCode::kInvalidArgument,
               "--text {}: no tokens to score (the text tokenizes to {} id(s))", a.text, ids.size());

  models::ModelBuildOptions build = a.build;
  load_lora_flag(a.lora, &build);
  runtime::CausalLmOptions opt;
  opt.threads = a.threads;
  opt.max_context = a.ctx;
  opt.build = build;
  opt.device = a.device;
  auto lm = runtime::CausalLm::load(a.model, opt);
  const int64_t vocab = lm->config().vocab_size;
  SAMPAN_CHECK(a.ctx <= lm->capacity(), ErrorCode::kInvalidArgument,
               "--ctx {}: exceeds the context of {} positions of {}", a.ctx, lm->capacity(), a.model);
  for (size_t i = 0; i < ids.size(); ++i) {
    SAMPAN_CHECK(ids[i] >= 0 && ids[i] < vocab, ErrorCode::kInvalidModel,
                 "{}: the tokenizer produced id {} outside the model's vocabulary of {}", a.model,
                 ids[i], vocab);
  }

  std::unique_ptr<runtime::CausalLm> ref_lm;
  const std::string ref_dir = a.ref_model.empty() ? a.model : a.ref_model;
  if (!a.ref_model.empty() || !is_default_build(build)) {
    runtime::CausalLmOptions ref_opt;
    ref_opt.threads = a.threads;
    ref_opt.max_context = a.ctx;
    ref_opt.device = a.device;  // both on one device: the measures compare formats, not backends
    ref_lm = runtime::CausalLm::load(ref_dir, ref_opt);
    SAMPAN_CHECK(ref_lm->config().vocab_size == vocab, ErrorCode::kInvalidArgument,
                 "--ref-model {}: vocabulary of {} tokens, but --model {} has {}", ref_dir,
                 ref_lm->config().vocab_size, a.model, vocab);
    SAMPAN_CHECK(a.ctx <= ref_lm->capacity(), ErrorCode::kInvalidArgument,
                 "--ctx {}: exceeds the context of {} positions of {}", a.ctx, ref_lm->capacity(),
                 ref_dir);
  }

  EvalTotals totals;
  for (const auto& w : windows) {
    Tensor m = window_logits(*lm, w);
    Tensor r = ref_lm ? window_logits(*ref_lm, w) : m;
    score_window(w, m.data<float>(), r.data<float>(), vocab, totals);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double n = static_cast<double>(totals.scored);
  const double ppl = std::exp(totals.nll_model / n);
  const double ref_ppl = std::exp(totals.nll_ref / n);
  const double mean_kl = totals.kl_sum / n;
  const double top1 = static_cast<double>(totals.top1_agree) / n;

  fmt::print("model      {} ({})\n", a.model, describe_build(build));
  fmt::print("reference  {}{}\n", ref_dir, ref_lm ? "" : " (the model itself: no build flag)");
  fmt::print("text       {}: {} tokens, {} windows of ctx {}, {} tokens scored (second half of "
             "each window)\n",
             a.text, ids.size(), windows.size(), a.ctx, totals.scored);
  fmt::print("perplexity model {:.4f}  reference {:.4f}\n", ppl, ref_ppl);
  fmt::print("KL(ref||model) mean {:.6f}  max {:.6f}\n", mean_kl, totals.kl_max);
  fmt::print("top-1 agreement {:.2f} %\n", 100.0 * top1);
  fmt::print("time       {:.2f} s\n", seconds);

  if (!a.json.empty()) {
    const models::QuantScheme& q = a.build.quantization;
    nlohmann::ordered_json j;
    j["model"] = a.model;
    j["ref_model"] = ref_dir;
    j["text"] = a.text;
    j["build"] = {{"quantization", models::weight_format_name(q.format)},
                  {"group_size", q.group_size},
                  {"symmetric", q.symmetric},
                  {"scale_dtype", dtype_name(q.scale_dtype)},
                  {"hadamard", a.build.hadamard.enabled},
                  {"hadamard_seed", a.build.hadamard.seed},
                  {"kv_cache_dtype", kv_dtype_name(a.build.kv_cache_dtype)},
                  {"kv_hadamard", a.build.kv_hadamard},
                  {"lora", a.lora}};
    j["ctx"] = a.ctx;
    j["max_tokens"] = a.max_tokens;
    j["tokens"] = ids.size();
    j["windows"] = windows.size();
    j["tokens_scored"] = totals.scored;
    j["nll"] = totals.nll_model / n;
    j["ref_nll"] = totals.nll_ref / n;
    j["ppl"] = ppl;
    j["ref_ppl"] = ref_ppl;
    j["mean_kl"] = mean_kl;
    j["max_kl"] = totals.kl_max;
    j["top1_agreement"] = top1;
    j["top1_pct"] = 100.0 * top1;
    j["seconds"] = seconds;
    std::ofstream out(a.json);
    SAMPAN_CHECK(out.good(), ErrorCode::kIo, "--json {}: cannot open the file for writing", a.json);
    out << j.dump(2) << '\n';
    SAMPAN_CHECK(out.good(), ErrorCode::kIo, "--json {}: write failed", a.json);
  }
  return 0;
}

}  // namespace

Runner add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand(
      "eval", "Perplexity, KL divergence and top-1 agreement of a model on a text");
  cmd->add_option("--model", a->model, "model directory or .gguf file (the build flags apply to a directory)")->required();
  cmd->add_option("--text", a->text, "UTF-8 text file to score")->required();
  cmd->add_option("--ref-model", a->ref_model,
                  "reference model directory (default: --model without build flags)");
  cmd->add_option("--ctx", a->ctx, "window length in tokens (default 512)");
  cmd->add_option("--max-tokens", a->max_tokens, "use only the first N tokens of the text")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", a->threads, "CPU threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", a->json, "also write every figure to this JSON file");
  add_model_build_flags(*cmd, &a->build);
  add_device_flag(*cmd, &a->device);
  add_lora_flag(*cmd, &a->lora);
  return [a] { return run_eval(*a); };
}

}  // namespace sampan::cli
