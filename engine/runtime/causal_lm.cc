#include "engine/runtime/causal_lm.h"

#include <filesystem>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/runtime/device_select.h"

namespace sampan::runtime {

std::unique_ptr<CausalLm> CausalLm::load(const std::string& dir, const CausalLmOptions& options) {
  // A directory (Hugging Face) or a model file of a registered format (a .gguf file).
  SAMPAN_CHECK(std::filesystem::is_directory(dir) || models::model_format_of(dir) != "hf",
               ErrorCode::kNotFound, "{}: model directory does not exist", dir);
  // Before reading any weights: a missing GPU is a one-line error, not a failure deep in load.
  require_device(options.device);
  std::unique_ptr<models::Model> model =
      models::load_model(dir, {.build = options.build, .optimize = options.optimize});
  return std::unique_ptr<CausalLm>(new CausalLm(std::move(model), options));
}

CausalLm::CausalLm(std::unique_ptr<models::Model> model, const CausalLmOptions& options)
    : model_(std::move(model)),
      bind_(models::DecoderBindings::from(model_->signature, model_->path)),
      pool_(options.threads) {
  model_->upload_constants(options.device);
  executor_ = std::make_unique<graph::Executor>(model_->graph, pool_, options.device);
  executor_->load_constants();
  executor_->set_cuda_graphs(options.cuda_graphs);
  if (!bind_.lora_ids.empty()) {
    const int n = static_cast<int>(options.build.lora.size());
    SAMPAN_CHECK(options.lora_adapter >= -1 && options.lora_adapter < n,
                 ErrorCode::kInvalidArgument,
                 "LoRA adapter {} requested, the model has {} (-1: none)", options.lora_adapter, n);
    lora_adapter_ = options.lora_adapter;
  }
  capacity_ = options.max_context;
  const HfConfig& c = model_->config;
  if (c.max_position_embeddings > 0) capacity_ = std::min(capacity_, c.max_position_embeddings);
  SAMPAN_CHECK(capacity_ > 0, ErrorCode::kInvalidArgument, "max context must be positive");
  // Uninitialised like before: rows past n_past are never read, and a host pool's pages are
  // then only committed as the context fills.
  kv_ = model_->allocate_kv_pools(1, capacity_, options.device, /*zero=*/false,
                                  fmt::format("max context {}", capacity_));
  log::debug("graph after passes ({}):\n{}", model_->pass_report.str(), model_->graph.dump());
}

int64_t CausalLm::kv_cache_bytes() const { return kv_.bytes(); }

void CausalLm::truncate(int64_t n) {
  SAMPAN_CHECK(n >= 0 && n <= n_past_, ErrorCode::kInvalidArgument,
               "cannot keep {} tokens of a cache holding {}", n, n_past_);
  n_past_ = n;
  cached_ids_.resize(static_cast<size_t>(n));
}

graph::MemoryPlan CausalLm::plan_activations(int64_t n_tokens, int64_t n_out) {
  std::map<std::string, Shape> shapes = {{bind_.ids, {n_tokens}},
                                         {bind_.positions, {n_tokens}},
                                         {bind_.seq_ids, {n_tokens}},
                                         {bind_.block_tables, {1, 1}},
                                         {bind_.logit_rows, {n_out}}};
  if (!bind_.lora_ids.empty()) shapes[bind_.lora_ids] = {n_tokens};
  for (size_t l = 0; l < kv_.k.size(); ++l) {
    shapes[bind_.k_cache[l]] = kv_.k[l].shape();
    shapes[bind_.v_cache[l]] = kv_.v[l].shape();
  }
  return executor_->plan_for(shapes);
}

Tensor CausalLm::forward(std::span<const int32_t> ids, bool all_logits) {
  const int64_t n = static_cast<int64_t>(ids.size());
  SAMPAN_CHECK(n > 0, ErrorCode::kInvalidArgument, "no token ids to run");
  SAMPAN_CHECK(n_past_ + n <= capacity_, ErrorCode::kInvalidArgument,
               "{} tokens after {} already cached exceed the context of {} tokens", n, n_past_,
               capacity_);
  // Here rather than only in the embedding kernel: a replayed CUDA graph runs no host checks.
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[static_cast<size_t>(i)];
    SAMPAN_CHECK(id >= 0 && id < config().vocab_size, ErrorCode::kInvalidArgument,
                 "token id {} at position {} is outside the vocabulary [0, {})", id, i,
                 config().vocab_size);
  }
  std::map<std::string, Tensor> in;
  in[bind_.ids] = Tensor::from_i32({n}, std::vector<int32_t>(ids.begin(), ids.end()));
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(n_past_ + i);
  in[bind_.positions] = Tensor::from_i32({n}, pos);
  // One sequence whose cache is one block of `capacity_` rows.
  in[bind_.seq_ids] = Tensor::from_i32({n}, std::vector<int32_t>(static_cast<size_t>(n), 0));
  in[bind_.block_tables] = Tensor::from_i32({1, 1}, {0});
  if (!bind_.lora_ids.empty()) {
    in[bind_.lora_ids] =
        Tensor::from_i32({n}, std::vector<int32_t>(static_cast<size_t>(n), lora_adapter_));
  }
  std::vector<int32_t> rows;
  if (all_logits) {
    for (int64_t i = 0; i < n; ++i) rows.push_back(static_cast<int32_t>(i));
  } else {
    rows.push_back(static_cast<int32_t>(n - 1));
  }
  in[bind_.logit_rows] = Tensor::from_i32({static_cast<int64_t>(rows.size())}, rows);
  model_->bind_kv_pools(kv_, in);
  // A decode step has the same shapes every time (one token, the whole-context table): recurring.
  std::vector<Tensor> out = executor_->run(in, /*recurring=*/n == 1 && !all_logits);
  n_past_ += n;
  cached_ids_.insert(cached_ids_.end(), ids.begin(), ids.end());
  // clone() on the CPU (the output views the executor's arena, reused by the next run); to()
  // copies a device output back to the host, complete on return.
  const Tensor& logits = out[bind_.logits_output];
  return logits.device().type == DeviceType::kCPU ? logits.clone() : logits.to(Device::cpu());
}

}  // namespace sampan::runtime
