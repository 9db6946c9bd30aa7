#include "engine/runtime/scheduler.h"

#include <algorithm>
#include <chrono>

namespace sampan::runtime {
namespace {

// Inserts `s` keeping `list` in arrival (handle) order.
template <class List>
void insert_by_arrival(List& list, std::unique_ptr<Sequence> s) {
  auto pos = std::lower_bound(list.begin(), list.end(), s->handle,
                              [](const std::unique_ptr<Sequence>& a, uint64_t h) {
                                return a->handle < h;
                              });
  list.insert(pos, std::move(s));
}

}  // namespace

Scheduler::Scheduler(const EngineOptions& options, BlockManager& blocks)
    : options_(options), blocks_(blocks) {}

void Scheduler::preempt_last() {
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  blocks_.release(victim->blocks);
  victim->n_computed = 0;
  ++preemptions_;
  // Keep `preempted` in arrival order so the earliest is re-admitted first.
  insert_by_arrival(preempted_, std::move(victim));
}

// Takes the next waiting request (preempted ones first) into `running` when the cache and the
// token budget allow; false when it cannot (FCFS: nothing behind it is tried).
bool Scheduler::admit_one(WaitingQueue& waiting, int64_t& budget) {
  std::unique_ptr<Sequence> s;
  bool from_preempted = false;
  if (!preempted_.empty()) {
    s = std::move(preempted_.front());
    preempted_.pop_front();
    from_preempted = true;
  } else {
    s = waiting.pop_front();
    if (!s) return false;
  }
  // A recomputed sequence may find its own earlier blocks still cached. One whose prompt
  // logprobs are still to be scored computes every position.
  const int64_t hit = s->wants_prompt_rows() ? 0 : blocks_.match_prefix(s->tokens, s->blocks);
  s->n_computed = hit;
  const int64_t chunk = std::min(s->n_pending(), budget);
  if (!blocks_.reserve(s->blocks, s->n_computed + chunk)) {
    blocks_.release(s->blocks);
    s->n_computed = 0;
    if (from_preempted) {
      preempted_.push_front(std::move(s));
    } else {
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
  plan_.batch.push_back({s.get(), chunk, -1, false});
  // Arrival order: a re-admitted preempted sequence may be older than running ones.
  insert_by_arrival(running_, std::move(s));
  return true;
}

StepPlan& Scheduler::plan(WaitingQueue& waiting) {
  plan_ = {};
  int64_t budget = options_.max_batched_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i].get();
    const int64_t chunk = std::min(s->n_pending(), budget);
    bool self_preempted = false;
    while (!blocks_.reserve(s->blocks, s->n_computed + chunk)) {
      // The most recent arrival gives way; it is never scheduled yet (arrival order).
      const bool is_self = running_.back().get() == s;
      preempt_last();
      if (is_self) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    const bool decode = s->n_pending() == 1 && s->n_generated() > 0;
    plan_.batch.push_back({s, chunk, -1, decode});
    budget -= chunk;
    ++i;
  }
  while (static_cast<int>(running_.size()) < options_.max_running && budget > 0) {
    if (!admit_one(waiting, budget)) break;
  }
  // Logit rows for the chunks that complete their sequence's pending tokens.
  for (Scheduled& b : plan_.batch) {
    plan_.n_tokens += b.n_tokens;
    plan_.max_blocks =
        std::max<int64_t>(plan_.max_blocks, static_cast<int64_t>(b.seq->blocks.blocks.size()));
    const Sequence& s = *b.seq;
    if (s.wants_prompt_rows()) {
      // The chunk's positions not scored yet (a sequence preempted mid-prompt recomputes
      // some it scored), up to the second-to-last prompt token: the last one's logits are the
      // first draw's.
      const int64_t start = std::max(s.n_computed, static_cast<int64_t>(s.prompt_lp.size()));
      const int64_t end = std::min(s.n_computed + b.n_tokens, s.n_prompt - 1);
      if (end > start) {
        b.prompt_row = plan_.n_out;
        b.n_prompt_rows = static_cast<int>(end - start);
        b.prompt_pos = start;
        plan_.n_out += b.n_prompt_rows;
      }
    }
    if (s.n_computed + b.n_tokens == static_cast<int64_t>(s.tokens.size())) {
      b.logit_row = plan_.n_out++;
    }
    plan_.n_decode += b.decode ? 1 : 0;
  }
  return plan_;
}

void Scheduler::remove_finished(const std::unordered_set<const Sequence*>& done) {
  if (done.empty()) return;
  std::erase_if(running_,
                [&](const std::unique_ptr<Sequence>& s) { return done.count(s.get()) > 0; });
}

}  // namespace sampan::runtime
