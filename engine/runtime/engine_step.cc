// One engine step (engine_impl.h): scheduling with preemption and admission, the graph inputs
// (padded for CUDA graphs when the step only decodes), the forward, and sampling on the host or
// the GPU. The engine thread's loop that calls step() is in engine.cc.
#include <algorithm>
#include <bit>
#include <unordered_set>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/runtime/engine_impl.h"

namespace sampan::runtime {

void Engine::Impl::preempt_last() {
  std::unique_ptr<Sequence> victim = std::move(running.back());
  running.pop_back();
  blocks->release(victim->blocks);
  victim->n_computed = 0;
  ++preemptions;
  // Keep `preempted` in arrival order so the earliest is re-admitted first.
  auto pos = std::lower_bound(preempted.begin(), preempted.end(), victim->handle,
                              [](const std::unique_ptr<Sequence>& a, uint64_t h) {
                                return a->handle < h;
                              });
  preempted.insert(pos, std::move(victim));
}

// Takes the next waiting request (preempted ones first) into `running` when the cache and the
// token budget allow; false when it cannot (FCFS: nothing behind it is tried).
bool Engine::Impl::admit_one(int64_t& budget) {
  std::unique_ptr<Sequence> s;
  bool from_preempted = false;
  if (!preempted.empty()) {
    s = std::move(preempted.front());
    preempted.pop_front();
    from_preempted = true;
  } else {
    std::lock_guard<std::mutex> lock(mu);
    if (waiting.empty()) return false;
    s = std::move(waiting.front());
    waiting.pop_front();
  }
  // A recomputed sequence may find its own earlier blocks still cached.
  const int64_t hit = blocks->match_prefix(s->tokens, s->blocks);
  s->n_computed = hit;
  const int64_t chunk = std::min(s->n_pending(), budget);
  if (!blocks->reserve(s->blocks, s->n_computed + chunk)) {
    blocks->release(s->blocks);
    s->n_computed = 0;
    if (from_preempted) {
      preempted.push_front(std::move(s));
    } else {
      std::lock_guard<std::mutex> lock(mu);
      waiting.push_front(std::move(s));
    }
    return false;
  }
  if (!s->admitted_once) {
    s->admitted_once = true;
    s->cached_prompt_tokens = hit;
    s->queue_s = seconds_since(s->submitted);
  }
  budget -= chunk;
  batch.push_back({s.get(), chunk, -1, false});
  // Arrival order: a re-admitted preempted sequence may be older than running ones.
  auto pos = std::lower_bound(running.begin(), running.end(), s->handle,
                              [](const std::unique_ptr<Sequence>& a, uint64_t h) {
                                return a->handle < h;
                              });
  running.insert(pos, std::move(s));
  return true;
}

void Engine::Impl::schedule() {
  batch.clear();
  int64_t budget = options.max_batched_tokens;
  for (size_t i = 0; i < running.size() && budget > 0;) {
    Sequence* s = running[i].get();
    const int64_t chunk = std::min(s->n_pending(), budget);
    bool self_preempted = false;
    while (!blocks->reserve(s->blocks, s->n_computed + chunk)) {
      // The most recent arrival gives way; it is never scheduled yet (arrival order).
      const bool is_self = running.back().get() == s;
      preempt_last();
      if (is_self) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    const bool decode = s->n_pending() == 1 && s->n_generated() > 0;
    batch.push_back({s, chunk, -1, decode});
    budget -= chunk;
    ++i;
  }
  while (static_cast<int>(running.size()) < options.max_running && budget > 0) {
    if (!admit_one(budget)) break;
  }
}

namespace {

// Padded batch size of a decode-only step (EngineOptions::cuda_graphs): few distinct shapes, so
// few recorded graphs, and at most 7 padding tokens once past 8.
int64_t decode_bucket(int64_t n) {
  return n <= 8 ? static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(n))) : (n + 7) / 8 * 8;
}

}  // namespace

// Fills the graph inputs of a decode-only step padded to a fixed shape (see
// EngineOptions::cuda_graphs) and returns true; false (nothing written) when the step has prompt
// tokens. Sequence i is token i and logit row i; padding token t >= n_seqs is sequence t at
// position 0, whose table row holds only the spare block.
bool Engine::Impl::fill_padded_decode() {
  for (const Scheduled& b : batch) {
    if (!b.decode || b.n_tokens != 1) return false;
  }
  const int64_t n_seqs = static_cast<int64_t>(batch.size());
  const int64_t n = decode_bucket(n_seqs);
  const int64_t width = (max_model_len + options.block_size - 1) / options.block_size;
  int32_t* ids = in_ids.reserve(n);
  int32_t* pos = in_positions.reserve(n);
  int32_t* seq_ids = in_seq_ids.reserve(n);
  int32_t* table = in_block_tables.reserve(n * width);
  int32_t* rows = in_logit_rows.reserve(n);
  for (int64_t t = 0; t < n; ++t) {
    int32_t* row = table + t * width;
    seq_ids[t] = static_cast<int32_t>(t);
    rows[t] = static_cast<int32_t>(t);
    if (t < n_seqs) {
      Scheduled& b = batch[static_cast<size_t>(t)];
      const Sequence& s = *b.seq;
      ids[t] = s.tokens[static_cast<size_t>(s.n_computed)];
      pos[t] = static_cast<int32_t>(s.n_computed);
      b.logit_row = static_cast<int>(t);
      const size_t nb = s.blocks.blocks.size();
      std::copy(s.blocks.blocks.begin(), s.blocks.blocks.end(), row);
      std::fill(row + nb, row + width, -1);
    } else {
      ids[t] = 0;
      pos[t] = 0;
      row[0] = static_cast<int32_t>(num_blocks);  // the spare block
      std::fill(row + 1, row + width, -1);
    }
  }
  inputs["ids"] = in_ids.view({n});
  inputs["positions"] = in_positions.view({n});
  inputs["seq_ids"] = in_seq_ids.view({n});
  inputs["block_tables"] = in_block_tables.view({n, width});
  inputs["logit_rows"] = in_logit_rows.view({n});
  return true;
}

// Fills the graph inputs of any step: its tokens in batch order, a block table row per
// sequence, the logit rows of the sequences that complete a prompt or decode.
void Engine::Impl::fill_step(int64_t n_tokens, int64_t max_blocks, int n_out) {
  const int64_t n_seqs = static_cast<int64_t>(batch.size());
  // The executor re-plans whenever an input shape changes: rounding the table width up to a
  // power of two keeps a steady decode batch on one plan while sequences grow.
  max_blocks = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(max_blocks)));
  int32_t* ids = in_ids.reserve(n_tokens);
  int32_t* pos = in_positions.reserve(n_tokens);
  int32_t* seq_ids = in_seq_ids.reserve(n_tokens);
  int32_t* table = in_block_tables.reserve(n_seqs * max_blocks);
  // A batch of partial prompt chunks produces no logits; one ignored row keeps n_out >= 1.
  int32_t* rows = in_logit_rows.reserve(std::max(n_out, 1));
  int64_t t = 0;
  for (int64_t si = 0; si < n_seqs; ++si) {
    const Scheduled& b = batch[static_cast<size_t>(si)];
    const Sequence& s = *b.seq;
    for (int64_t j = 0; j < b.n_tokens; ++j, ++t) {
      ids[t] = s.tokens[static_cast<size_t>(s.n_computed + j)];
      pos[t] = static_cast<int32_t>(s.n_computed + j);
      seq_ids[t] = static_cast<int32_t>(si);
    }
    if (b.logit_row >= 0) rows[b.logit_row] = static_cast<int32_t>(t - 1);
    int32_t* row = table + si * max_blocks;
    const size_t nb = s.blocks.blocks.size();
    std::copy(s.blocks.blocks.begin(), s.blocks.blocks.end(), row);
    std::fill(row + nb, row + max_blocks, -1);
  }
  if (n_out == 0) rows[0] = 0;
  inputs["ids"] = in_ids.view({n_tokens});
  inputs["positions"] = in_positions.view({n_tokens});
  inputs["seq_ids"] = in_seq_ids.view({n_tokens});
  inputs["block_tables"] = in_block_tables.view({n_seqs, max_blocks});
  inputs["logit_rows"] = in_logit_rows.view({std::max(n_out, 1)});
}

void Engine::Impl::run_batch() {
  const auto t0 = EngineClock::now();
  int64_t n_tokens = 0, max_blocks = 1;
  int n_out = 0, n_decode = 0;
  for (Scheduled& b : batch) {
    n_tokens += b.n_tokens;
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(b.seq->blocks.blocks.size()));
    if (b.seq->n_computed + b.n_tokens == static_cast<int64_t>(b.seq->tokens.size())) {
      b.logit_row = n_out++;
    }
    n_decode += b.decode ? 1 : 0;
  }
  const int64_t n_seqs = static_cast<int64_t>(batch.size());
  const bool padded = pad_decode && fill_padded_decode();
  if (!padded) fill_step(n_tokens, max_blocks, n_out);

  Tensor host_logits;  // [max(n_out, 1), vocab], or the padded batch's rows
  std::vector<int32_t> device_ids;  // by logit row, when some rows were sampled on the GPU
  std::string error;
  try {
    if (options.test_fault_every_n_steps > 0 &&
        ++forwards_for_fault_injection % options.test_fault_every_n_steps == 0) {
      fail(ErrorCode::kInternal, "injected fault (test hook) in forward {}",
           forwards_for_fault_injection);
    }
    // A padded decode step recurs with the same shapes: the executor replays it as a CUDA graph.
    const std::vector<Tensor> out = executor->run(inputs, /*recurring=*/padded);
    bool host_rows = false, device_rows = false;
    for (const Scheduled& b : batch) {
      if (b.logit_row < 0) continue;
      (b.seq->device_sampling ? device_rows : host_rows) = true;
    }
    if (device_rows) device_ids = sample_on_device(out[0]);
    // The CPU sampler reads the logits on the host: a device output is copied back (only the
    // rows the step asked for, and not at all when the GPU sampled every one of them); a CPU
    // output is read in place from the executor's arena.
    if (out[0].device().type == DeviceType::kCPU) {
      host_logits = out[0];
    } else if (host_rows) {
      host_logits = out[0].to(Device::cpu());
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::unordered_set<const Sequence*> done;
  if (!error.empty()) {
    log::error("engine step over {} sequences failed: {}", n_seqs, error);
    for (const Scheduled& b : batch) {
      EngineEvent ev;
      ev.error = error;
      finish(*b.seq, EngineFinish::kError, std::move(ev));
      done.insert(b.seq);
    }
  } else {
    const int64_t vocab = config.vocab_size;
    for (const Scheduled& b : batch) {
      Sequence& s = *b.seq;
      s.n_computed += b.n_tokens;
      blocks->commit(s.blocks, s.tokens, s.n_computed);
      if (b.logit_row < 0) continue;
      if (s.device_sampling) {
        handle_device_sample(s, device_ids[static_cast<size_t>(b.logit_row)]);
      } else {
        handle_logits(s, host_logits.data<float>() + static_cast<int64_t>(b.logit_row) * vocab);
      }
      if (s.finished) done.insert(&s);
    }
  }
  remove_finished(done);
  ++steps;
  const StepStats st{static_cast<int>(n_seqs), n_decode, n_tokens, seconds_since(t0)};
  std::function<void(const StepStats&)> observer;
  {
    std::lock_guard<std::mutex> lock(mu);
    observer = step_observer;
  }
  if (observer) observer(st);
}

// Samples the next token of `s` on the host and streams it (handle_sample).
void Engine::Impl::handle_logits(Sequence& s, const float* logits) {
  const int64_t vocab = config.vocab_size;
  SampleResult r;
  try {
    r = s.sampler->sample(std::span<const float>(logits, static_cast<size_t>(vocab)), s.tokens);
  } catch (const std::exception& e) {
    EngineEvent ev;
    ev.error = e.what();
    finish(s, EngineFinish::kError, std::move(ev));
    return;
  }
  handle_sample(s, std::move(r));
}

// Samples every logit row of the step on the GPU (rows of CPU-sampled sequences and padding
// greedily, their ids unused): one launch, one copy of the ids back.
std::vector<int32_t> Engine::Impl::sample_on_device(const Tensor& logits) {  // [rows, vocab]
  std::vector<DeviceSampleRow> rows(static_cast<size_t>(logits.dim(0)));
  for (DeviceSampleRow& r : rows) r.params.temperature = 0;
  for (const Scheduled& b : batch) {
    const Sequence& s = *b.seq;
    if (b.logit_row < 0 || !s.device_sampling) continue;
    DeviceSampleRow& r = rows[static_cast<size_t>(b.logit_row)];
    r.params = s.request.sampling;
    r.seed = s.device_seed;
    r.step = static_cast<uint64_t>(s.n_generated());
  }
  return device_sampler->sample(logits, rows);
}

void Engine::Impl::handle_device_sample(Sequence& s, int32_t id) {
  if (id < 0) {
    // The kernel's answer for what the CPU Sampler refuses (sampler.cc, check_inputs).
    EngineEvent ev;
    ev.error = "sampling: the logits hold a NaN or +inf, or every logit is -inf";
    finish(s, EngineFinish::kError, std::move(ev));
    return;
  }
  SampleResult r;
  r.id = id;  // no logprob: the request did not ask for one (device_sampling_eligible)
  handle_sample(s, std::move(r));
}

// Streams the sampled token of `s`; on finishing, sends the final event (which marks the
// sequence finished for removal).
void Engine::Impl::handle_sample(Sequence& s, SampleResult r) {
  auto tail = [&](EngineEvent& ev) {
    if (s.stops->stopped()) return;
    ev.text += s.stops->push(s.decoder->flush());
    ev.text += s.stops->flush();
  };
  if (std::find(s.stop_ids.begin(), s.stop_ids.end(), r.id) != s.stop_ids.end()) {
    EngineEvent ev;
    tail(ev);
    finish(s, EngineFinish::kStop, std::move(ev));
    return;
  }
  s.tokens.push_back(r.id);
  if (s.n_generated() == 1) s.first_token_s = seconds_since(s.submitted);
  EngineEvent ev;
  ev.token = r.id;
  ev.text = s.stops->push(s.decoder->push(r.id));
  ev.sample = std::move(r);
  std::optional<EngineFinish> why;
  if (s.stops->stopped()) {
    why = EngineFinish::kStop;
    ev.stop_matched = s.stops->matched();
  } else if (s.n_generated() >= s.request.max_tokens ||
             static_cast<int64_t>(s.tokens.size()) >= max_model_len) {
    why = EngineFinish::kLength;
  }
  if (!why) {
    emit(s, ev);
    return;
  }
  tail(ev);
  finish(s, *why, std::move(ev));
}

void Engine::Impl::remove_finished(const std::unordered_set<const Sequence*>& done) {
  if (done.empty()) return;
  std::erase_if(running, [&](const std::unique_ptr<Sequence>& s) { return done.count(s.get()) > 0; });
}

}  // namespace sampan::runtime
