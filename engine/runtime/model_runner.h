// The Engine's model runner: a StepPlan in, the step's logits (or the GPU's sampled ids) out.
// It owns the model (models::Model), its executor and thread pool, the KV pools and the graph
// input buffers; it fills the decoder inputs by role from the plan (padding decode-only steps to
// a few fixed shapes for CUDA graphs), runs the forward and, on a GPU with device sampling,
// samples the rows that may be sampled there. Engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/models/model.h"
#include "engine/runtime/device_sampler.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/scheduler.h"

namespace sampan::runtime {

// What one forward produced.
struct StepOutput {
  std::string error;      // non-empty: the forward failed; nothing else is set
  Tensor host_logits;     // [rows, vocab] f32 on the host, when a row is sampled on the host
  std::vector<int32_t> device_ids;  // by logit row, when some rows were sampled on the GPU
};

class ModelRunner {
 public:
  // Takes the loaded model; uploads its constants to options.device and builds the executor.
  ModelRunner(std::unique_ptr<models::Model> model, const EngineOptions& options);

  // Allocates the KV pools: num_blocks blocks for sequences, plus the spare block padded decode
  // steps write to (pad_decode()). Throws Error(kOutOfMemory) naming the pool.
  void allocate_kv(int64_t num_blocks, int64_t max_model_len);

  // Runs the step. Assigns logit rows of a padded decode step (one per sequence, in order).
  StepOutput run(StepPlan& plan);

  const models::Model& model() const { return *model_; }
  // The CPU thread pool of the forward (every device: on CUDA it runs the host-side work). Idle
  // between steps, when the output processor samples on it.
  ThreadPool& host_runner() { return *pool_; }
  bool pad_decode() const { return pad_decode_; }
  bool device_sampling() const { return device_sampler_ != nullptr; }
  int64_t kv_pool_bytes() const { return kv_.bytes(); }
  const graph::Executor::GraphStats& graph_stats() const { return executor_->graph_stats(); }

 private:
  // A growable i32 buffer whose tensors view one allocation, so the per-step graph inputs cost
  // no allocation once the largest batch has been seen.
  class I32Input {
   public:
    int32_t* reserve(int64_t n);
    Tensor view(const Shape& shape) const {
      return Tensor::from_storage(storage_, 0, shape, DType::kI32);
    }

   private:
    std::shared_ptr<Storage> storage_;
    int64_t capacity_ = 0;
  };

  bool fill_padded_decode(StepPlan& plan);
  void fill_step(const StepPlan& plan);
  std::vector<int32_t> sample_on_device(const StepPlan& plan, const Tensor& logits);

  const EngineOptions& options_;
  std::unique_ptr<models::Model> model_;
  models::DecoderBindings bind_;  // the graph's input names, by role
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<graph::Executor> executor_;
  std::unique_ptr<DeviceSampler> device_sampler_;  // CUDA with device_sampling only
  bool pad_decode_ = false;  // EngineOptions::pad_decode_steps, or CUDA graphs on a CUDA device
  int64_t num_blocks_ = 0;   // block ids handed to sequences; block num_blocks_ is the spare
  int64_t table_width_ = 0;  // padded steps: blocks of a max_model_len sequence
  models::KvPools kv_;
  std::map<std::string, Tensor> inputs_;  // the KV pools bound once, the rest every step
  I32Input in_ids_, in_positions_, in_seq_ids_, in_block_tables_, in_logit_rows_;
  I32Input in_lora_ids_;  // graphs with LoRA adapters only (bind_.lora_ids)
  int64_t forwards_for_fault_injection_ = 0;  // EngineOptions::test_fault_every_n_steps
};

}  // namespace sampan::runtime
