// sampan finetune --model DIR --data FILE.jsonl --out ADAPTER_DIR [--eval-data FILE.jsonl]
//   [--rank 8] [--alpha 16] [--dropout 0.05] [--targets q_proj,k_proj,v_proj,o_proj] [--lr 2e-4]
//   [--steps N | --epochs E] [--batch-size B] [--seq-len L] [--grad-accum K] [--warmup N]
//   [--seed S] [--threads N] [--precision f32|bf16] [--save-every N] [--resume]
//   [--eval-every N] [--weight-decay W] [--max-grad-norm G] [--log-format text|json] [--recompute] [--profile]
//   [model build flags: --quantization int4 keeps a QLoRA-style quantized base, ...]
//
// Trains a LoRA adapter on a frozen base (train/lora_trainer.h) and writes it in PEFT's format
// to ADAPTER_DIR (models/lora_adapter.h), loadable by peft and by `--lora`.
//
// The run is a pure function of the flags and the data: the examples are shuffled per epoch by
// a generator seeded with (seed, epoch), a step takes grad_accum micro-batches of batch_size
// examples in that order, and the learning rate follows linear warmup then cosine decay to 0 at
// the last step (HF get_cosine_schedule_with_warmup). So a checkpoint (ADAPTER_DIR/checkpoint/:
// trainer state + the flags it was made with) lets --resume continue bit-exactly: it replays
// the order up to the saved step. Ctrl-C finishes the step in progress, saves a checkpoint and
// the adapter, and exits with status 130.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/core/error.h"
#include "engine/loaders/safetensors_writer.h"
#include "engine/models/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/train/dataset.h"
#include "engine/train/lora_trainer.h"
#include "server/commands.h"
#include "server/model_flags.h"

namespace sampan::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct FinetuneArgs {
  std::string model, data, out, eval_data, targets = "q_proj,k_proj,v_proj,o_proj";
  std::string precision = "f32", log_format = "text";
  int64_t rank = 8, steps = 0, batch_size = 4, seq_len = 512, grad_accum = 1, warmup = 0;
  int64_t save_every = 0, eval_every = 0;
  double alpha = 16, dropout = 0.05, lr = 2e-4, epochs = 0, weight_decay = 0.0;
  double max_grad_norm = 1.0;
  uint64_t seed = 0;
  int threads = 0;
  bool resume = false;
  bool recompute = false;
  bool profile = false;
  models::ModelBuildOptions build;
};

std::atomic<bool> g_interrupted{false};
void on_finetune_sigint(int) { g_interrupted.store(true); }

std::vector<std::string> split_targets(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string t = text.substr(start, end - start);
    SAMPAN_CHECK(models::lora_module_index(t) >= 0, ErrorCode::kInvalidArgument,
                 "--targets: '{}' is not a module LoRA can target (one of q_proj, k_proj, "
                 "v_proj, o_proj, gate_proj, up_proj, down_proj)",
                 t);
    SAMPAN_CHECK(std::find(out.begin(), out.end(), t) == out.end(), ErrorCode::kInvalidArgument,
                 "--targets: '{}' is named twice", t);
    out.push_back(std::move(t));
    start = end + 1;
  }
  return out;
}

// What a checkpoint must agree on with the resuming run (anything else changes the data order,
// the schedule or the adapter's shape, so continuing would not be the same run).
nlohmann::json run_identity(const FinetuneArgs& a, int64_t total_steps, int64_t n_examples) {
  return {{"model", a.model},           {"data", a.data},
          {"examples", n_examples},     {"rank", a.rank},
          {"alpha", a.alpha},           {"dropout", a.dropout},
          {"targets", a.targets},       {"lr", a.lr},
          {"steps", total_steps},       {"batch_size", a.batch_size},
          {"seq_len", a.seq_len},       {"grad_accum", a.grad_accum},
          {"warmup", a.warmup},         {"seed", a.seed},
          {"precision", a.precision},   {"weight_decay", a.weight_decay},
          {"max_grad_norm", a.max_grad_norm}};
}

// The learning rate of optimizer step `step` (0-based), as HF's cosine schedule with warmup.
double schedule(double lr, int64_t step, int64_t warmup, int64_t total) {
  if (step < warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  const double progress = static_cast<double>(step - warmup) /
                          static_cast<double>(std::max<int64_t>(1, total - warmup));
  return lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

// The micro-batch order: epoch e visits the examples in a permutation drawn from (seed, e).
class BatchOrder {
 public:
  BatchOrder(size_t n_examples, int64_t batch_size, uint64_t seed)
      : n_(n_examples), batch_(static_cast<size_t>(batch_size)), seed_(seed) {}
  int64_t batches_per_epoch() const { return static_cast<int64_t>((n_ + batch_ - 1) / batch_); }
  // Rows of micro-batch `index` counted from the start of training.
  std::vector<size_t> rows(int64_t index) {
    const int64_t epoch = index / batches_per_epoch();
    if (epoch != epoch_) {
      perm_.resize(n_);
      std::iota(perm_.begin(), perm_.end(), size_t{0});
      std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
      // Fisher-Yates with an explicit draw (std::shuffle's is implementation-defined).
      for (size_t i = n_; i > 1; --i) std::swap(perm_[i - 1], perm_[rng() % i]);
      epoch_ = epoch;
    }
    const size_t begin = static_cast<size_t>(index % batches_per_epoch()) * batch_;
    const size_t end = std::min(n_, begin + batch_);
    return {perm_.begin() + static_cast<ptrdiff_t>(begin),
            perm_.begin() + static_cast<ptrdiff_t>(end)};
  }

 private:
  size_t n_, batch_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<size_t> perm_;
};

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

class Progress {
 public:
  Progress(bool json, int64_t total) : json_(json), total_(total), tty_(isatty(2) != 0) {}

  void step(int64_t step, double loss, double lr, double grad_norm, double tok_per_s,
            double elapsed, int64_t tokens) {
    const double eta = tok_per_s > 0 && step > 0
                           ? elapsed / static_cast<double>(step) * static_cast<double>(total_ - step)
                           : -1;
    if (json_) {
      emit({{"event", "step"}, {"step", step}, {"steps", total_}, {"loss", loss}, {"lr", lr},
            {"grad_norm", grad_norm}, {"tokens", tokens}, {"tokens_per_s", tok_per_s},
            {"elapsed_s", elapsed}, {"eta_s", eta}});
      return;
    }
    const std::string text = fmt::format("step {}/{} loss {:.4f} lr {:.3g} {:.0f} tok/s ETA {}",
                                         step, total_, loss, lr, tok_per_s, fmt_duration(eta));
    if (tty_) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(1, total_));
      std::fprintf(stderr, "\r[%s%s] %s\033[K", std::string(static_cast<size_t>(filled), '=').c_str(),
                   std::string(static_cast<size_t>(kWidth - filled), ' ').c_str(), text.c_str());
      if (step == total_) std::fputc('\n', stderr);
    } else {
      std::fprintf(stderr, "%s\n", text.c_str());
    }
  }

  void line(const nlohmann::json& event, const std::string& text) {
    if (json_) {
      emit(event);
    } else {
      std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", text.c_str());
    }
  }

 private:
  void emit(const nlohmann::json& j) {
    std::fprintf(stdout, "%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  bool json_;
  int64_t total_;
  bool tty_;
};

double evaluate(train::LoraTrainer& trainer, const std::vector<train::Example>& examples,
                int64_t batch_size) {
  double loss = 0;
  int64_t tokens = 0;
  for (size_t begin = 0; begin < examples.size(); begin += static_cast<size_t>(batch_size)) {
    std::vector<size_t> rows;
    for (size_t i = begin; i < std::min(examples.size(), begin + static_cast<size_t>(batch_size)); ++i) {
      rows.push_back(i);
    }
    const train::MicroResult r = trainer.evaluate(train::make_batch(examples, rows));
    loss += r.loss_sum;
    tokens += r.tokens;
  }
  return tokens > 0 ? loss / static_cast<double>(tokens) : 0.0;
}

int run_finetune(FinetuneArgs& a) {
  models::Precision precision{};
  SAMPAN_CHECK(models::parse_precision(a.precision, &precision), ErrorCode::kInvalidArgument,
               "--precision '{}': expected f32 or bf16", a.precision);
  SAMPAN_CHECK(a.log_format == "text" || a.log_format == "json", ErrorCode::kInvalidArgument,
               "--log-format '{}': expected text or json", a.log_format);
  models::LoraConfig lora;
  lora.rank = a.rank;
  lora.alpha = a.alpha;
  lora.dropout = a.dropout;
  lora.targets = split_targets(a.targets);
  lora.base_model = a.model;

  models::LoadOptions load;
  load.build = a.build;
  std::shared_ptr<const models::Model> base = models::load_model(a.model, load);
  SAMPAN_CHECK(models::is_decoder_format(base->format), ErrorCode::kUnsupported,
               "{}: finetuning needs a decoder LLM (safetensors or GGUF); this is a {} model",
               a.model, base->format);
  auto tokenizer = tok::load_tokenizer(a.model);
  std::optional<chat::Template> tmpl;
  if (!tokenizer->chat_template().empty()) {
    tmpl = chat::Template::parse(tokenizer->chat_template(), a.model + "/chat_template");
  }
  const int64_t seq_len = std::min(a.seq_len, base->config.max_position_embeddings > 0
                                                  ? base->config.max_position_embeddings
                                                  : a.seq_len);
  train::DatasetStats stats;
  const std::vector<train::Example> examples =
      train::load_examples(a.data, *tokenizer, tmpl ? &*tmpl : nullptr, seq_len, &stats);
  train::DatasetStats eval_stats;
  std::vector<train::Example> eval_examples;
  if (!a.eval_data.empty()) {
    eval_examples = train::load_examples(a.eval_data, *tokenizer, tmpl ? &*tmpl : nullptr,
                                         seq_len, &eval_stats);
  }

  BatchOrder order(examples.size(), a.batch_size, a.seed);
  const int64_t steps_per_epoch =
      std::max<int64_t>(1, order.batches_per_epoch() / a.grad_accum);
  const int64_t total_steps =
      a.steps > 0 ? a.steps
                  : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(
                                             (a.epochs > 0 ? a.epochs : 1.0) *
                                             static_cast<double>(steps_per_epoch))));
  const nlohmann::json identity = run_identity(a, total_steps, stats.examples);

  train::TrainerOptions topt;
  topt.lora = lora;
  topt.adamw.weight_decay = a.weight_decay;
  topt.max_grad_norm = a.max_grad_norm;
  topt.seed = a.seed;
  topt.threads = a.threads;
  topt.precision = precision;
  topt.recompute = a.recompute;
  train::LoraTrainer trainer(base, topt);
  trainer.set_profiling(a.profile);

  const fs::path out(a.out);
  const fs::path ckpt = out / "checkpoint";
  if (a.resume) {
    const fs::path state = ckpt / "trainer_state.safetensors";
    SAMPAN_CHECK(fs::exists(state), ErrorCode::kNotFound,
                 "--resume: {} does not exist (no checkpoint to continue)", state.string());
    std::ifstream in(ckpt / "run.json");
    nlohmann::json saved;
    try {
      saved = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorCode::kInvalidArgument, "--resume: {}: not JSON: {}", (ckpt / "run.json").string(),
           e.what());
    }
    for (auto it = identity.begin(); it != identity.end(); ++it) {
      SAMPAN_CHECK(saved.contains(it.key()) && saved[it.key()] == it.value(),
                   ErrorCode::kInvalidArgument,
                   "--resume: the checkpoint was made with {} = {}, this run has {}", it.key(),
                   saved.contains(it.key()) ? saved[it.key()].dump() : "nothing", it.value().dump());
    }
    trainer.load_state(state.string());
  }

  Progress progress(a.log_format == "json", total_steps);
  progress.line({{"event", "start"}, {"examples", stats.examples}, {"lines", stats.lines},
                 {"truncated", stats.truncated}, {"dropped", stats.dropped},
                 {"tokens", stats.tokens}, {"loss_tokens", stats.loss_tokens},
                 {"steps", total_steps}, {"resumed_at", trainer.steps_done()}},
                fmt::format("{}: {} examples ({} tokens, {} trained on) from {} lines; {} "
                            "truncated to {} tokens, {} without a token to learn dropped; {} "
                            "steps{}",
                            a.data, stats.examples, stats.tokens, stats.loss_tokens, stats.lines,
                            stats.truncated, seq_len, stats.dropped, total_steps,
                            a.resume ? fmt::format(", resuming at step {}", trainer.steps_done())
                                     : ""));

  auto save = [&](bool checkpoint) {
    models::save_lora_adapter(trainer.adapter(), out.string());
    if (!checkpoint) return;
    fs::create_directories(ckpt);
    trainer.save_state((ckpt / "trainer_state.safetensors").string());
    write_text_file((ckpt / "run.json").string(), identity.dump(2) + "\n");
  };
  auto eval_event = [&](int64_t step) {
    if (eval_examples.empty()) return;
    const double loss = evaluate(trainer, eval_examples, a.batch_size);
    progress.line({{"event", "eval"}, {"step", step}, {"eval_loss", loss},
                   {"eval_ppl", std::exp(loss)}},
                  fmt::format("step {}: eval loss {:.4f} (perplexity {:.3f})", step, loss,
                              std::exp(loss)));
  };

  g_interrupted.store(false);
  auto previous = std::signal(SIGINT, on_finetune_sigint);
  const auto t0 = Clock::now();
  int64_t tokens_seen = 0;
  if (trainer.steps_done() == 0) eval_event(0);
  bool interrupted = false;
  while (trainer.steps_done() < total_steps) {
    const int64_t step = trainer.steps_done();
    double loss_sum = 0;
    int64_t n_tokens = 0;
    for (int64_t k = 0; k < a.grad_accum; ++k) {
      const train::TrainBatch batch =
          train::make_batch(examples, order.rows(step * a.grad_accum + k));
      const train::MicroResult r = trainer.accumulate(batch);
      loss_sum += r.loss_sum;
      n_tokens += r.tokens;
      tokens_seen += batch.batch * batch.seq_len;
    }
    const double lr = schedule(a.lr, step, a.warmup, total_steps);
    // A step whose micro-batches hold no target (possible only with tiny batches) still advances.
    const double norm = trainer.step(lr, std::max<int64_t>(1, n_tokens));
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    progress.step(step + 1, n_tokens > 0 ? loss_sum / static_cast<double>(n_tokens) : 0.0, lr,
                  norm, static_cast<double>(tokens_seen) / std::max(elapsed, 1e-9), elapsed,
                  tokens_seen);
    const int64_t done = step + 1;
    if (a.eval_every > 0 && done % a.eval_every == 0 && done < total_steps) eval_event(done);
    if (a.save_every > 0 && done % a.save_every == 0 && done < total_steps) save(true);
    if (g_interrupted.load()) {
      interrupted = true;
      break;
    }
  }
  std::signal(SIGINT, previous);
  save(true);
  if (interrupted) {
    progress.line({{"event", "interrupted"}, {"step", trainer.steps_done()}, {"out", a.out}},
                  fmt::format("interrupted at step {}/{}: adapter and checkpoint saved to {}; "
                              "continue with --resume",
                              trainer.steps_done(), total_steps, a.out));
    return 130;
  }
  eval_event(trainer.steps_done());
  if (a.profile) {
    double total = 0;
    for (const auto& [op, sec] : trainer.op_seconds()) total += sec;
    std::fprintf(stderr, "time by op over %lld training steps (forward + backward):\n",
                 static_cast<long long>(trainer.steps_done()));
    for (const auto& [op, sec] : trainer.op_seconds()) {
      if (sec <= 0) continue;
      std::fprintf(stderr, "  %-24s %9.3f s  %5.1f %%\n", op.c_str(), sec,
                   total > 0 ? 100.0 * sec / total : 0.0);
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  progress.line({{"event", "done"}, {"steps", trainer.steps_done()}, {"out", a.out},
                 {"elapsed_s", elapsed}},
                fmt::format("done: {} steps in {}; adapter written to {}", trainer.steps_done(),
                            fmt_duration(elapsed), a.out));
  return 0;
}

}  // namespace

Runner add_finetune(CLI::App& app) {
  auto a = std::make_shared<FinetuneArgs>();
  auto* cmd = app.add_subcommand("finetune", "Train a LoRA adapter (PEFT format) on JSON lines");
  cmd->add_option("--model", a->model, "base model directory or .gguf file")->required();
  cmd->add_option("--data", a->data,
                  "training data, JSON lines: {\"text\"}, {\"prompt\",\"completion\"} or "
                  "{\"messages\"}")
      ->required();
  cmd->add_option("--out", a->out, "adapter directory to write (PEFT format)")->required();
  cmd->add_option("--eval-data", a->eval_data, "held-out data (same forms) for eval loss");
  cmd->add_option("--rank", a->rank, "LoRA rank r")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cmd->add_option("--alpha", a->alpha, "LoRA alpha (scale alpha / r)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dropout", a->dropout, "dropout on the LoRA input")->check(CLI::Range(0.0, 0.95));
  cmd->add_option("--targets", a->targets,
                  "comma-separated modules: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  cmd->add_option("--lr", a->lr, "peak learning rate")->check(CLI::PositiveNumber);
  auto* steps = cmd->add_option("--steps", a->steps, "optimizer steps")->check(CLI::PositiveNumber);
  auto* epochs = cmd->add_option("--epochs", a->epochs, "passes over the data (default 1)")
                     ->check(CLI::PositiveNumber);
  steps->excludes(epochs);
  cmd->add_option("--batch-size", a->batch_size, "examples per micro-batch")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--seq-len", a->seq_len, "longest example in tokens (longer ones are truncated)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option("--grad-accum", a->grad_accum, "micro-batches per optimizer step")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--warmup", a->warmup, "linear warmup steps")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a->seed, "adapter init, dropout and data order");
  cmd->add_option("--threads", a->threads, "CPU threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--precision", a->precision, "f32 or bf16 (bf16 GEMMs, f32 master weights)");
  cmd->add_option("--save-every", a->save_every, "checkpoint every N steps")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-every", a->eval_every, "eval loss every N steps (also at start and end)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--weight-decay", a->weight_decay, "AdamW decoupled weight decay")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-grad-norm", a->max_grad_norm, "clip the global gradient norm (0: off)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--log-format", a->log_format, "text (progress on stderr) or json (lines on stdout)");
  cmd->add_flag("--resume", a->resume, "continue from OUT/checkpoint");
  cmd->add_flag("--profile", a->profile,
                "print the training graph's time by op at the end (stderr)");
  cmd->add_flag("--recompute", a->recompute,
                "keep only each layer's input and recompute its forward in the backward (less "
                "memory, same gradients)");
  add_model_build_flags(*cmd, &a->build);
  return [a] { return run_finetune(*a); };
}

}  // namespace sampan::cli
