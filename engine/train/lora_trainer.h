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
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/models/lora_adapter.h"
#include "engine/models/model.h"
#include "engine/train/optimizer.h"  // AdamWOptions

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

struct TrainerOptions {
  models::LoraConfig lora;
  AdamWOptions adamw;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  uint64_t seed = 0;           // adapter init and dropout masks
  int threads = 0;             // 0: every core
  // kF32: everything in f32 (GEMMs exact in f32 under an ExactGemmScope, so on AMX CPUs too).
  // kBf16 (like AMP O2): the projection GEMMs (base and LoRA, forward and backward) take
  // bf16-rounded operands with f32 sums (train_graph.h); master weights, optimizer state, norms,
  // attention, softmax and the loss stay f32. On AMX CPUs the frozen weights' GEMMs then run on
  // the tiles; elsewhere this changes the numerics more than the speed.
  models::Precision precision = models::Precision::kF32;
  // Recompute each layer's forward in the backward instead of keeping its activations (only
  // each layer's input is kept); the gradients are bit-identical either way.
  bool recompute = false;
  // kBf16: drop repeated roundings of one value (TrainGraphOptions::merge_roundings); the same
  // bits either way, off only to check that.
  bool merge_roundings = true;
  // kBf16: fold roundings read only by GEMMs into them (TrainGraphOptions::fold_roundings); the
  // same bits either way, off only to check that.
  bool fold_roundings = true;
};

struct MicroResult {
  double loss_sum = 0;  // sum of per-token cross-entropy (nats) over non-ignored targets
  int64_t tokens = 0;   // non-ignored targets
};

class LoraTrainer {
 public:
  // `base` must be a decoder (is_decoder_format); it is not modified. A fresh adapter from
  // options.seed (make_lora_adapter), or a copy of `initial` when given (it must fit the base;
  // its rank, alpha and targets then win over options.lora, which still sets the dropout).
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

  // The gradients accumulate() gathered since the last step (the sum over micro-batches of
  // d(loss_sum)/dA and d(loss_sum)/dB, before step()'s division and clipping), by PEFT tensor
  // name (lora_tensor_name): copies, for tests and diagnostics.
  std::map<std::string, Tensor> gradients() const;

  // Per-op wall time of the training graph (CPU): on, every accumulate() adds each node's time;
  // op_seconds() sums them by op name, largest first ("linear_grad_input", ...). Off by default
  // (two clock reads per node).
  void set_profiling(bool on);
  std::vector<std::pair<std::string, double>> op_seconds() const;

  // The adapter as trained so far (its A and B are the trainer's master weights).
  const models::LoraAdapter& adapter() const;
  int64_t steps_done() const;

  // Everything `--resume` needs to continue bit-exactly: adapter, AdamW moments, step count,
  // dropout RNG state, and the gradients accumulated since the last step. Written as one
  // safetensors file with a JSON header (save is atomic). load_state refuses a file saved
  // under another seed or for other adapter shapes (one line naming the file).
  void save_state(const std::string& file) const;
  void load_state(const std::string& file);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::train
