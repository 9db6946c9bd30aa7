#include "engine/runtime/model_runner.h"

#include <algorithm>
#include <bit>

#include "engine/core/error.h"

namespace sampan::runtime {
namespace {

// Padded batch size of a decode-only step (EngineOptions::cuda_graphs): few distinct shapes, so
// few recorded graphs, and at most 7 padding tokens once past 8.
int64_t decode_bucket(int64_t n) {
  return n <= 8 ? static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n))) : (n + 7) / 8 * 8;
}

}  // namespace

int32_t* ModelRunner::I32Input::reserve(int64_t n) {
  if (!storage_ || capacity_ < n) {
    capacity_ = std::max<int64_t>(n, capacity_ * 2);
    storage_ = Storage::allocate(static_cast<size_t>(capacity_) * sizeof(int32_t), Device::cpu());
  }
  return static_cast<int32_t*>(storage_->data());
}

ModelRunner::ModelRunner(std::unique_ptr<models::Model> model, const EngineOptions& options)
    : options_(options),
      model_(std::move(model)),
      bind_(models::DecoderBindings::from(model_->signature, model_->path)) {
  const EngineOptions& o = options_;
  model_->upload_constants(o.device);
  pool_ = std::make_unique<ThreadPool>(o.threads);
  executor_ = std::make_unique<graph::Executor>(model_->graph, *pool_, o.device);
  executor_->load_constants();
  executor_->set_cuda_graphs(o.cuda_graphs);
  pad_decode_ = o.pad_decode_steps || (o.cuda_graphs && o.device.type == DeviceType::kCUDA);
  if (o.device_sampling && o.device.type == DeviceType::kCUDA) {
    device_sampler_ = std::make_unique<DeviceSampler>(o.device);
  }
}

void ModelRunner::allocate_kv(int64_t num_blocks, int64_t max_model_len) {
  num_blocks_ = num_blocks;
  table_width_ = (max_model_len + options_.block_size - 1) / options_.block_size;
  // Padded decode steps write their padding tokens into block num_blocks, which the block
  // manager never hands out.
  const int64_t pool_blocks = num_blocks + (pad_decode_ ? 1 : 0);
  kv_ = model_->allocate_kv_pools(pool_blocks, options_.block_size, options_.device,
                                  /*zero=*/true,
                                  fmt::format("{} blocks of {} tokens", pool_blocks,
                                              options_.block_size));
  model_->bind_kv_pools(kv_, inputs_);
}

// Fills the graph inputs of a decode-only step padded to a fixed shape (see
// EngineOptions::cuda_graphs) and returns true; false (nothing written) when the step has prompt
// tokens. Sequence i is token i and logit row i; padding token t >= n_seqs is sequence t at
// position 0, whose table row holds only the spare block.
bool ModelRunner::fill_padded_decode(StepPlan& plan) {
  for (const Scheduled& b : plan.batch) {
    if (!b.decode || b.n_tokens != 1) return false;
  }
  const int64_t n_seqs = static_cast<int64_t>(plan.batch.size());
  const int64_t n = decode_bucket(n_seqs);
  const int64_t width = table_width_;
  int32_t* ids = in_ids_.reserve(n);
  int32_t* pos = in_positions_.reserve(n);
  int32_t* seq_ids = in_seq_ids_.reserve(n);
  int32_t* table = in_block_tables_.reserve(n * width);
  int32_t* rows = in_logit_rows_.reserve(n);
  int32_t* lora = bind_.lora_ids.empty() ? nullptr : in_lora_ids_.reserve(n);
  for (int64_t t = 0; t < n; ++t) {
    int32_t* row = table + t * width;
    seq_ids[t] = static_cast<int32_t>(t);
    rows[t] = static_cast<int32_t>(t);
    if (t < n_seqs) {
      Scheduled& b = plan.batch[static_cast<size_t>(t)];
      const Sequence& s = *b.seq;
      ids[t] = s.tokens[static_cast<size_t>(s.n_computed)];
      pos[t] = static_cast<int32_t>(s.n_computed);
      if (lora != nullptr) lora[t] = s.lora_adapter;
      b.logit_row = static_cast<int>(t);
      const size_t nb = s.blocks.blocks.size();
      std::copy(s.blocks.blocks.begin(), s.blocks.blocks.end(), row);
      std::fill(row + nb, row + width, -1);
    } else {
      ids[t] = 0;
      pos[t] = 0;
      if (lora != nullptr) lora[t] = -1;
      row[0] = static_cast<int32_t>(num_blocks_);  // the spare block
      std::fill(row + 1, row + width, -1);
    }
  }
  inputs_[bind_.ids] = in_ids_.view({n});
  inputs_[bind_.positions] = in_positions_.view({n});
  inputs_[bind_.seq_ids] = in_seq_ids_.view({n});
  inputs_[bind_.block_tables] = in_block_tables_.view({n, width});
  inputs_[bind_.logit_rows] = in_logit_rows_.view({n});
  if (lora != nullptr) inputs_[bind_.lora_ids] = in_lora_ids_.view({n});
  return true;
}

// Fills the graph inputs of any step: its tokens in batch order, a block table row per
// sequence, the logit rows of the sequences that complete a prompt or decode.
void ModelRunner::fill_step(const StepPlan& plan) {
  const int64_t n_seqs = static_cast<int64_t>(plan.batch.size());
  const int64_t n_tokens = plan.n_tokens;
  const int n_out = plan.n_out;
  // The executor re-plans whenever an input shape changes: rounding the table width up to a
  // power of two keeps a steady decode batch on one plan while sequences grow.
  const int64_t max_blocks = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(plan.max_blocks)));
  int32_t* ids = in_ids_.reserve(n_tokens);
  int32_t* pos = in_positions_.reserve(n_tokens);
  int32_t* seq_ids = in_seq_ids_.reserve(n_tokens);
  int32_t* table = in_block_tables_.reserve(n_seqs * max_blocks);
  // A batch of partial prompt chunks produces no logits; one ignored row keeps n_out >= 1.
  int32_t* rows = in_logit_rows_.reserve(std::max(n_out, 1));
  int32_t* lora = bind_.lora_ids.empty() ? nullptr : in_lora_ids_.reserve(n_tokens);
  int64_t t = 0;
  for (int64_t si = 0; si < n_seqs; ++si) {
    const Scheduled& b = plan.batch[static_cast<size_t>(si)];
    const Sequence& s = *b.seq;
    for (int64_t j = 0; j < b.n_tokens; ++j, ++t) {
      ids[t] = s.tokens[static_cast<size_t>(s.n_computed + j)];
      pos[t] = static_cast<int32_t>(s.n_computed + j);
      seq_ids[t] = static_cast<int32_t>(si);
      if (lora != nullptr) lora[t] = s.lora_adapter;
    }
    if (b.logit_row >= 0) rows[b.logit_row] = static_cast<int32_t>(t - 1);
    for (int j = 0; j < b.n_prompt_rows; ++j) {
      rows[b.prompt_row + j] =
          static_cast<int32_t>(t - b.n_tokens + (b.prompt_pos - s.n_computed) + j);
    }
    int32_t* row = table + si * max_blocks;
    const size_t nb = s.blocks.blocks.size();
    std::copy(s.blocks.blocks.begin(), s.blocks.blocks.end(), row);
    std::fill(row + nb, row + max_blocks, -1);
  }
  if (n_out == 0) rows[0] = 0;
  inputs_[bind_.ids] = in_ids_.view({n_tokens});
  inputs_[bind_.positions] = in_positions_.view({n_tokens});
  inputs_[bind_.seq_ids] = in_seq_ids_.view({n_tokens});
  inputs_[bind_.block_tables] = in_block_tables_.view({n_seqs, max_blocks});
  inputs_[bind_.logit_rows] = in_logit_rows_.view({std::max(n_out, 1)});
  if (lora != nullptr) inputs_[bind_.lora_ids] = in_lora_ids_.view({n_tokens});
}

StepOutput ModelRunner::run(StepPlan& plan) {
  const bool padded = pad_decode_ && fill_padded_decode(plan);
  if (!padded) fill_step(plan);
  StepOutput result;
  try {
    if (options_.test_fault_every_n_steps > 0 &&
        ++forwards_for_fault_injection_ % options_.test_fault_every_n_steps == 0) {
      fail(ErrorCode::kInternal, "injected fault (test hook) in forward {}",
           forwards_for_fault_injection_);
    }
    // A padded decode step recurs with the same shapes: the executor replays it as a CUDA graph.
    const std::vector<Tensor> out = executor_->run(inputs_, /*recurring=*/padded);
    bool host_rows = false, device_rows = false;
    for (const Scheduled& b : plan.batch) {
      if (b.n_prompt_rows > 0) host_rows = true;  // scored on the host
      if (b.logit_row < 0) continue;
      (b.seq->device_sampling ? device_rows : host_rows) = true;
    }
    const Tensor& logits = out[bind_.logits_output];
    if (device_rows) result.device_ids = sample_on_device(plan, logits);
    // The CPU sampler reads the logits on the host: a device output is copied back (only the
    // rows the step asked for, and not at all when the GPU sampled every one of them); a CPU
    // output is read in place from the executor's arena.
    if (logits.device().type == DeviceType::kCPU) {
      result.host_logits = logits;
    } else if (host_rows) {
      result.host_logits = logits.to(Device::cpu());
    }
  } catch (const std::exception& e) {
    result = {};
    result.error = e.what();
  }
  return result;
}

// Samples every logit row of the step on the GPU (rows of CPU-sampled sequences and padding
// greedily, their ids unused): one launch, one copy of the ids back.
std::vector<int32_t> ModelRunner::sample_on_device(const StepPlan& plan,
                                                   const Tensor& logits) {  // [rows, vocab]
  std::vector<DeviceSampleRow> rows(static_cast<size_t>(logits.dim(0)));
  for (DeviceSampleRow& r : rows) r.params.temperature = 0;
  for (const Scheduled& b : plan.batch) {
    const Sequence& s = *b.seq;
    if (b.logit_row < 0 || !s.device_sampling) continue;
    DeviceSampleRow& r = rows[static_cast<size_t>(b.logit_row)];
    r.params = s.request.sampling;
    r.seed = s.device_seed;
    r.step = static_cast<uint64_t>(s.n_generated());
  }
  return device_sampler_->sample(logits, rows);
}

}  // namespace sampan::runtime
