#include "engine/runtime/causal_lm.h"

#include <filesystem>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/runtime/device_select.h"

namespace sampan::runtime {

std::unique_ptr<CausalLm> CausalLm::load(const std::string& dir, const CausalLmOptions& options) {
  SAMPAN_CHECK(std::filesystem::is_directory(dir), ErrorCode::kNotFound,
               "{}: model directory does not exist", dir);
  // Before reading any weights: a missing GPU is a one-line error, not a failure deep in load.
  require_device(options.device);
  HfConfig config = load_hf_config(dir);
  WeightStore store = WeightStore::open(dir);
  return std::unique_ptr<CausalLm>(new CausalLm(std::move(config), std::move(store), options));
}

CausalLm::CausalLm(HfConfig config, WeightStore store, const CausalLmOptions& options)
    : config_(std::move(config)), store_(std::move(store)), pool_(options.threads) {
  weights_ = models::load_llama_weights(config_, store_, options.build);
  graph_ = models::build_llama_graph(config_, weights_, options.build);
  if (options.optimize) pass_report_ = graph::passes::optimize(graph_);
  executor_ = std::make_unique<graph::Executor>(graph_, pool_, options.device);
  executor_->load_constants();
  executor_->set_cuda_graphs(options.cuda_graphs);
  capacity_ = options.max_context;
  if (config_.max_position_embeddings > 0) {
    capacity_ = std::min(capacity_, config_.max_position_embeddings);
  }
  SAMPAN_CHECK(capacity_ > 0, ErrorCode::kInvalidArgument, "max context must be positive");
  // The graph's pool contract (models/llama.h): f32 values, or raw i8 rows of the quantized
  // format; one block holding the whole sequence either way.
  const cpu::KvDtype kv = options.build.kv_cache_dtype;
  const bool f32 = kv == cpu::KvDtype::kF32;
  const Shape pool = {1, capacity_,
                      f32 ? config_.kv_dim()
                          : cpu::kv_row_bytes(kv, config_.n_head_kv, config_.head_dim)};
  const DType pool_dtype = f32 ? DType::kF32 : DType::kI8;
  // Uninitialised like before: rows past n_past are never read, and a host pool's pages are
  // then only committed as the context fills.
  auto make_pool = [&](const char* name, int64_t layer) {
    return allocate_named(pool, pool_dtype, options.device,
                          fmt::format("KV cache pool {}.{} (max context {})", name, layer,
                                      capacity_),
                          Fill::kUninitialized);
  };
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    k_cache_.push_back(make_pool("k_cache", l));
    v_cache_.push_back(make_pool("v_cache", l));
  }
  log::debug("graph after passes ({}):\n{}", pass_report_.str(), graph_.dump());
}

int64_t CausalLm::kv_cache_bytes() const {
  int64_t b = 0;
  for (const Tensor& t : k_cache_) b += t.nbytes();
  for (const Tensor& t : v_cache_) b += t.nbytes();
  return b;
}

void CausalLm::truncate(int64_t n) {
  SAMPAN_CHECK(n >= 0 && n <= n_past_, ErrorCode::kInvalidArgument,
               "cannot keep {} tokens of a cache holding {}", n, n_past_);
  n_past_ = n;
  cached_ids_.resize(static_cast<size_t>(n));
}

graph::MemoryPlan CausalLm::plan_activations(int64_t n_tokens, int64_t n_out) {
  std::map<std::string, Shape> shapes = {{"ids", {n_tokens}},
                                         {"positions", {n_tokens}},
                                         {"seq_ids", {n_tokens}},
                                         {"block_tables", {1, 1}},
                                         {"logit_rows", {n_out}}};
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    shapes[fmt::format("k_cache.{}", l)] = k_cache_[static_cast<size_t>(l)].shape();
    shapes[fmt::format("v_cache.{}", l)] = v_cache_[static_cast<size_t>(l)].shape();
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
    SAMPAN_CHECK(id >= 0 && id < config_.vocab_size, ErrorCode::kInvalidArgument,
                 "token id {} at position {} is outside the vocabulary [0, {})", id, i,
                 config_.vocab_size);
  }
  std::map<std::string, Tensor> in;
  in["ids"] = Tensor::from_i32({n}, std::vector<int32_t>(ids.begin(), ids.end()));
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(n_past_ + i);
  in["positions"] = Tensor::from_i32({n}, pos);
  // One sequence whose cache is one block of `capacity_` rows.
  in["seq_ids"] = Tensor::from_i32({n}, std::vector<int32_t>(static_cast<size_t>(n), 0));
  in["block_tables"] = Tensor::from_i32({1, 1}, {0});
  std::vector<int32_t> rows;
  if (all_logits) {
    for (int64_t i = 0; i < n; ++i) rows.push_back(static_cast<int32_t>(i));
  } else {
    rows.push_back(static_cast<int32_t>(n - 1));
  }
  in["logit_rows"] = Tensor::from_i32({static_cast<int64_t>(rows.size())}, rows);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    in[fmt::format("k_cache.{}", l)] = k_cache_[static_cast<size_t>(l)];
    in[fmt::format("v_cache.{}", l)] = v_cache_[static_cast<size_t>(l)];
  }
  // A decode step has the same shapes every time (one token, the whole-context table): recurring.
  std::vector<Tensor> out = executor_->run(in, /*recurring=*/n == 1 && !all_logits);
  n_past_ += n;
  cached_ids_.insert(cached_ids_.end(), ids.begin(), ids.end());
  // clone() on the CPU (the output views the executor's arena, reused by the next run); to()
  // copies a device output back to the host, complete on return.
  return out[0].device().type == DeviceType::kCPU ? out[0].clone() : out[0].to(Device::cpu());
}

}  // namespace sampan::runtime
