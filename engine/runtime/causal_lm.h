// CausalLm: a loaded decoder model ready to run — config, mapped weights, the optimised graph,
// its executor and a single-sequence KV cache. The batched, paged runtime of the serving stack
// (runtime::Engine) feeds the same graph with many sequences and real block tables; this is the
// one-sequence path used by the CLI and benchmarks.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/passes.h"
#include "engine/loaders/hf_config.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/llama.h"

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
};

class CausalLm {
 public:
  // Loads config.json and the safetensors weights of `dir`, checks every tensor, builds and
  // optimises the graph. Throws Error with a one-line message naming the file and tensor.
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

  const HfConfig& config() const { return config_; }
  const WeightStore& weights() const { return store_; }
  const graph::Graph& graph() const { return graph_; }
  const graph::passes::PassReport& pass_report() const { return pass_report_; }
  // The activation memory plan of a forward over n_tokens tokens with n_out logit rows.
  graph::MemoryPlan plan_activations(int64_t n_tokens, int64_t n_out);
  int64_t kv_cache_bytes() const;
  int threads() const { return pool_.concurrency(); }
  Device device() const { return executor_->device(); }
  const graph::Executor::GraphStats& graph_stats() const { return executor_->graph_stats(); }

 private:
  CausalLm(HfConfig config, WeightStore store, const CausalLmOptions& options);

  HfConfig config_;
  WeightStore store_;
  models::LlamaWeights weights_;
  graph::Graph graph_;
  graph::passes::PassReport pass_report_;
  ThreadPool pool_;
  std::unique_ptr<graph::Executor> executor_;
  int64_t capacity_ = 0;
  // Per layer [1, capacity, kv_dim] f32 (or [1, capacity, kv_row_bytes] i8 for a quantized
  // cache), on the model's device: the paged graph's pool with a single block that holds the
  // whole sequence (block_tables [[0]]).
  std::vector<Tensor> k_cache_, v_cache_;
  int64_t n_past_ = 0;
  std::vector<int32_t> cached_ids_;
};

}  // namespace sampan::runtime
