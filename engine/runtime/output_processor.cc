#include "engine/runtime/output_processor.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>

#include "engine/core/log.h"

namespace sampan::runtime {
OutputProcessor::OutputProcessor(BlockManager& blocks, int64_t vocab, int64_t max_model_len,
                                 std::function<void()> on_final, ThreadPool* sample_runner)
    : blocks_(blocks), vocab_(vocab), max_model_len_(max_model_len),
      on_final_(std::move(on_final)), sample_runner_(sample_runner) {}

// fn(0 .. n - 1), on the sample runner when there is one with threads to spare and more than one
// row, else in order on this thread. fn must not throw (pool tasks).
void OutputProcessor::run_rows(int64_t n, const std::function<void(int64_t)>& fn) {
  if (sample_runner_ != nullptr && n > 1 && sample_runner_->concurrency() > 1) {
    sample_runner_->run(n, fn);
  } else {
    for (int64_t t = 0; t < n; ++t) fn(t);
  }
}

// Sampling reads only the sequence's logits row, its tokens and its own Sampler, so the rows are
// sampled first (in parallel where there is a runner and more than one row) and everything with
// side effects (blocks, events, stop checks) then runs in batch order as before. One sequence
// costs 0.04-0.8 ms (bench_sampler: 32,000 to 128,256 logits, greedy to top-p) and ~3 ms with a
// broad nucleus (top-p 0.9 over a near-flat distribution), which one by one on the engine thread
// was a serial part of every step growing with the batch: bench_engine, 64 sequences, 2 threads,
// TinyLlama shape, time per step after the forward 188 ms -> 85-102 (temperature 1, top-p 0.9),
// 4.3 -> 2.7 (greedy).
void OutputProcessor::sample_host_rows(const StepPlan& plan, const StepOutput& out) {
  const size_t n = plan.batch.size();
  host_rows_.clear();
  for (size_t i = 0; i < n; ++i) {
    const Scheduled& b = plan.batch[i];
    if (b.logit_row >= 0 && !b.seq->device_sampling) host_rows_.push_back(i);
  }
  if (host_rows_.empty()) return;
  if (samples_.size() < n) {
    samples_.resize(n);
    sample_errors_.resize(n);
  }
  const auto one = [&](int64_t t) {
    const size_t i = host_rows_[static_cast<size_t>(t)];
    const Scheduled& b = plan.batch[i];
    Sequence& s = *b.seq;
    sample_errors_[i].clear();
    try {
      const float* logits =
          out.host_logits.data<float>() + static_cast<int64_t>(b.logit_row) * vocab_;
      samples_[i] =
          s.sampler->sample(std::span<const float>(logits, static_cast<size_t>(vocab_)), s.tokens);
    } catch (const std::exception& e) {
      sample_errors_[i] = e.what();
      if (sample_errors_[i].empty()) sample_errors_[i] = "sampling failed";
    } catch (...) {  // nothing may leave a pool task
      sample_errors_[i] = "sampling failed";
    }
  };
  run_rows(static_cast<int64_t>(host_rows_.size()), one);
}

std::unordered_set<const Sequence*> OutputProcessor::process(const StepPlan& plan,
                                                             const StepOutput& out) {
  std::unordered_set<const Sequence*> done;
  if (!out.error.empty()) {
    log::error("engine step over {} sequences failed: {}", plan.batch.size(), out.error);
    for (const Scheduled& b : plan.batch) {
      EngineEvent ev;
      ev.error = out.error;
      finish(*b.seq, EngineFinish::kError, std::move(ev));
      done.insert(b.seq);
    }
    return done;
  }
  sample_host_rows(plan, out);
  score_prompt_rows(plan, out);
  for (size_t i = 0; i < plan.batch.size(); ++i) {
    const Scheduled& b = plan.batch[i];
    Sequence& s = *b.seq;
    if (b.n_prompt_rows > 0 && !prompt_errors_[i].empty()) {
      EngineEvent ev;
      ev.error = prompt_errors_[i];
      finish(s, EngineFinish::kError, std::move(ev));
      done.insert(&s);
      continue;
    }
    s.n_computed += b.n_tokens;
    blocks_.commit(s.blocks, s.tokens, s.n_computed);
    if (b.logit_row < 0) continue;
    if (s.device_sampling) {
      handle_device_sample(s, out.device_ids[static_cast<size_t>(b.logit_row)]);
    } else if (!sample_errors_[i].empty()) {
      EngineEvent ev;
      ev.error = sample_errors_[i];
      finish(s, EngineFinish::kError, std::move(ev));
    } else {
      handle_sample(s, std::move(samples_[i]));
    }
    if (s.finished) done.insert(&s);
  }
  return done;
}

// Every prompt row of the step, in parallel where there is a runner (rows are independent; each
// writes its own entry of its sequence's prompt_lp, sized first): position p's logits score
// token p + 1. A row that cannot be scored leaves its sequence's first error in prompt_errors_.
// A 1,000-token prompt is 1,000 passes of log-sum-exp and top-k over the vocabulary.
void OutputProcessor::score_prompt_rows(const StepPlan& plan, const StepOutput& out) {
  const size_t n = plan.batch.size();
  prompt_errors_.assign(n, std::string());
  prompt_jobs_.clear();
  for (size_t i = 0; i < n; ++i) {
    const Scheduled& b = plan.batch[i];
    if (b.n_prompt_rows == 0) continue;
    std::vector<SampleResult>& lp = b.seq->prompt_lp;
    const size_t base = lp.size();
    lp.resize(base + static_cast<size_t>(b.n_prompt_rows));
    for (int j = 0; j < b.n_prompt_rows; ++j) prompt_jobs_.push_back({i, base, j});
  }
  if (prompt_jobs_.empty()) return;
  std::vector<std::string> errors(prompt_jobs_.size());
  const auto one = [&](int64_t t) {
    const PromptJob& job = prompt_jobs_[static_cast<size_t>(t)];
    const Scheduled& b = plan.batch[job.batch];
    Sequence& s = *b.seq;
    try {
      const float* row =
          out.host_logits.data<float>() + static_cast<int64_t>(b.prompt_row + job.row) * vocab_;
      const int64_t p = b.prompt_pos + job.row;
      s.prompt_lp[job.base + static_cast<size_t>(job.row)] =
          score_token(std::span<const float>(row, static_cast<size_t>(vocab_)),
                      s.tokens[static_cast<size_t>(p + 1)],
                      static_cast<size_t>(s.request.prompt_logprobs));
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(t)] = e.what()[0] != '\0' ? e.what() : "prompt logprobs failed";
    } catch (...) {  // nothing may leave a pool task
      errors[static_cast<size_t>(t)] = "prompt logprobs failed";
    }
  };
  run_rows(static_cast<int64_t>(prompt_jobs_.size()), one);
  for (size_t t = 0; t < errors.size(); ++t) {
    std::string& e = prompt_errors_[prompt_jobs_[t].batch];
    if (e.empty() && !errors[t].empty()) e = std::move(errors[t]);
  }
}

void OutputProcessor::emit(Sequence& s, EngineEvent& ev) {
  if (s.request.prompt_logprobs >= 0 && !s.prompt_lp_sent) {
    ev.prompt_logprobs = std::move(s.prompt_lp);
    s.prompt_lp_sent = true;
  }
  if (!s.on_event) return;
  try {
    s.on_event(ev);
  } catch (const std::exception& e) {
    // A caller's callback must not take the engine down with it.
    log::warn("request {}: event callback threw: {}", s.request.id, e.what());
  }
}

void OutputProcessor::finish(Sequence& s, EngineFinish why, EngineEvent ev) {
  blocks_.release(s.blocks);
  s.finished = true;
  ev.finished = true;
  ev.finish = why;
  ev.usage.prompt_tokens = s.n_prompt;
  ev.usage.completion_tokens = s.n_generated();
  ev.usage.cached_prompt_tokens = s.cached_prompt_tokens;
  ev.timings.queue_s = s.admitted_once ? s.queue_s : seconds_since(s.submitted);
  ev.timings.first_token_s = s.first_token_s;
  ev.timings.total_s = seconds_since(s.submitted);
  emit(s, ev);
  if (on_final_) on_final_();
}

void OutputProcessor::handle_device_sample(Sequence& s, int32_t id) {
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
void OutputProcessor::handle_sample(Sequence& s, SampleResult r) {
  auto tail = [&](EngineEvent& ev) {
    if (s.stops->stopped()) return;
    ev.text += s.stops->push(s.decoder->flush());
    ev.text += s.stops->flush();
  };
  if (std::find(s.stop_ids.begin(), s.stop_ids.end(), r.id) != s.stop_ids.end()) {
    EngineEvent ev;
    ev.stop_token = r.id;
    ev.sample = std::move(r);
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
    if (s.request.include_stop_str) ev.text += ev.stop_matched;
  } else if (s.n_generated() >= s.request.max_tokens ||
             static_cast<int64_t>(s.tokens.size()) >= max_model_len_) {
    why = EngineFinish::kLength;
  }
  if (!why) {
    emit(s, ev);
    return;
  }
  tail(ev);
  finish(s, *why, std::move(ev));
}

}  // namespace sampan::runtime
