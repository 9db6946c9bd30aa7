// LoRA finetuning of a decoder (Llama, Mistral, Qwen2; safetensors or GGUF base): the base stays
// frozen (f32, bf16, f16, FP8, INT4 or GGUF blocks, as loaded), the adapter's A and B are the
// only parameters. The training graph is the Llama graph in a non-paged training form with the
// adapter matrices as graph inputs, a token-level cross-entropy, and backward nodes appended by
// autograd.h (one gradient rule per op). AdamW keeps f32 master copies of A and B.
//
// Loss convention (what callers and the goldens rely on): a TrainBatch holds `targets` already
// shifted (targets[t] is the token that should follow ids[t], or kIgnoreIndex). accumulate() adds
// the gradient of the SUM of the per-token cross-entropies of its batch; step() divides the
// accumulated gradients by the token count it is given (the non-ignored targets of every
// micro-batch since the last step), clips by global norm, and takes one AdamW step. So a step over
// K micro-batches equals one step over their concatenation (token-weighted mean), whatever K is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/models/lora_adapter.h"
#include "engine/models/model.h"

namespace sampan::train {

inline constexpr int32_t kIgnoreIndex = -100;

struct TrainBatch {
  int64_t batch = 0;             // sequences
  int64_t seq_len = 0;           // tokens per sequence (rows are padded to it)
  std::vector<int32_t> ids;      // [batch * seq_len]; padding ids are any valid id
  std::vector<int32_t> targets;  // [batch * seq_len]; kIgnoreIndex where no loss
  // Tokens of each row that are real (the rest is padding; attention never reads it): [batch].
  std::vector<int32_t> lengths;
  // targets != kIgnoreIndex (defined here, inline: dataset.cc and the trainer both use it).
  int64_t n_targets() const {
    int64_t n = 0;
    for (int32_t t : targets) n += t != kIgnoreIndex ? 1 : 0;
    return n;
  }
};

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled (Loshchilov & Hutter), as torch.optim.AdamW
};

struct TrainerOptions {
  models::LoraConfig lora;
  AdamWOptions adamw;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  uint64_t seed = 0;           // adapter init and dropout masks
  int threads = 0;             // 0: every core
  // kF32: everything in f32. kBf16 (like AMP O2): the GEMMs take bf16-rounded operands with f32
  // sums; master weights, optimizer state, norms, softmax and the loss stay f32.
  models::Precision precision = models::Precision::kF32;
  bool recompute = false;  // recompute each layer's forward in the backward instead of keeping it
};

struct MicroResult {
  double loss_sum = 0;  // sum of per-token cross-entropy (nats) over non-ignored targets
  int64_t tokens = 0;   // non-ignored targets
};

class LoraTrainer {
 public:
  // `base` must be a decoder (is_decoder_format); it is not modified. A fresh adapter from
  // options.seed (make_lora_adapter), or `initial` when given (it must fit the base).
  LoraTrainer(std::shared_ptr<const models::Model> base, const TrainerOptions& options,
              const models::LoraAdapter* initial = nullptr);
  ~LoraTrainer();

  // Forward + backward of one micro-batch in training mode (dropout on); gradients add up.
  MicroResult accumulate(const TrainBatch& batch);
  // One optimizer step over what accumulate() gathered, at learning rate `lr`; `tokens` is the sum
  // of their MicroResult::tokens (> 0). Returns the global gradient norm before clipping. Zeroes
  // the gradients.
  double step(double lr, int64_t tokens);
  // Forward only, dropout off, no gradients kept.
  MicroResult evaluate(const TrainBatch& batch);

  // The adapter as trained so far (its A and B are the trainer's master weights).
  const models::LoraAdapter& adapter() const;
  int64_t steps_done() const;

  // Everything `--resume` needs to continue bit-exactly: adapter, AdamW moments, step count,
  // dropout RNG state. Written as one safetensors file with a JSON header (save is atomic).
  void save_state(const std::string& file) const;
  void load_state(const std::string& file);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::train
