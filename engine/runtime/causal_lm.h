// CausalLm: a loaded decoder model (models::Model: config, graph, signature, weights) ready to
// run — its executor and a single-sequence KV cache. The batched, paged runtime of the serving
// stack (runtime::Engine) feeds the same kind of Model with many sequences and real block tables;
// this is the one-sequence path used by the CLI and benchmarks.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/models/model.h"

namespace sampan::runtime {

struct CausalLmOptions {
  int threads = 0;             // 0: one per available core
  int64_t max_context = 4096;  // KV cache rows; capped by max_position_embeddings
  bool optimize = true;        // run the fusion passes
  models::ModelBuildOptions build;  // quantization, rotation, KV-cache format
  // Where the graph runs and the KV cache lives. Weights are uploaded at load; forward() still
  // returns logits on the host. A CUDA device must be usable (runtime/device_select.h).
  Device device = Device::cpu();
  // On a CUDA device, one-token forwards (decode) are recorded once as a CUDA graph and then
  // replayed (graph/executor.h). Off: every forward launches node by node.
  bool cuda_graphs = true;
  // Which adapter of build.lora every token runs through (its index there), or -1 for the base
  // alone; ignored without adapters. Out of range: Error(kInvalidArgument) at load.
  int lora_adapter = 0;
};

class CausalLm {
 public:
  // Loads a model directory (config.json + safetensors) or a GGUF file (`dir` names either),
  // checks every tensor, builds and optimises the graph. Throws Error with a one-line message
  // naming the file and tensor.
  static std::unique_ptr<CausalLm> load(const std::string& dir, const CausalLmOptions& options);

  // Feeds `ids` at positions n_past() .. n_past()+n-1, appending their K/V to the cache.
  // Returns logits [n, vocab] (all_logits) or [1, vocab] for the last token; the tensor is a
  // host (CPU) copy the caller owns, whatever the device. An id outside the vocabulary throws
  // Error(kInvalidArgument) naming it, before anything runs.
  Tensor forward(std::span<const int32_t> ids, bool all_logits);

  void reset() { truncate(0); }
  // Forgets cached tokens beyond the first n (their K/V rows are simply overwritten later).
  void truncate(int64_t n);
  // The ids whose K/V the cache holds, in order.
  const std::vector<int32_t>& cached_ids() const { return cached_ids_; }
  int64_t n_past() const { return n_past_; }
  int64_t capacity() const { return capacity_; }

  const HfConfig& config() const { return model_->config; }
  const models::Model& model() const { return *model_; }
  // model().store is the safetensors weight store of a directory model, null for a GGUF file.
  const graph::Graph& graph() const { return model_->graph; }
  const graph::passes::PassReport& pass_report() const { return model_->pass_report; }
  // The activation memory plan of a forward over n_tokens tokens with n_out logit rows.
  graph::MemoryPlan plan_activations(int64_t n_tokens, int64_t n_out);
  int64_t kv_cache_bytes() const;
  int threads() const { return pool_.concurrency(); }
  Device device() const { return executor_->device(); }
  const graph::Executor::GraphStats& graph_stats() const { return executor_->graph_stats(); }
  // Per-node wall time of the forward graph (CPU; see Executor::set_profiling): summed over
  // every forward while on, by node index of graph().
  void set_profiling(bool on) { executor_->set_profiling(on); }
  const std::vector<double>& node_seconds() const { return executor_->node_seconds(); }

 private:
  CausalLm(std::unique_ptr<models::Model> model, const CausalLmOptions& options);

  std::unique_ptr<models::Model> model_;
  models::DecoderBindings bind_;  // the graph's input names, by role
  ThreadPool pool_;
  std::unique_ptr<graph::Executor> executor_;
  int64_t capacity_ = 0;
  // One block of `capacity_` rows per layer, on the model's device: the paged graph's pools
  // with a single block that holds the whole sequence (block_tables [[0]]).
  models::KvPools kv_;
  int64_t n_past_ = 0;
  std::vector<int32_t> cached_ids_;
  int32_t lora_adapter_ = -1;  // bound as every token's lora_ids when the graph has that input
};

}  // namespace sampan::runtime
