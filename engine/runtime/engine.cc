#include "engine/runtime/engine.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_set>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/runtime/device_select.h"
#include "engine/runtime/engine_impl.h"
#include "engine/runtime/sequence.h"

namespace sampan::runtime {

const char* engine_finish_name(EngineFinish f) {
  switch (f) {
    case EngineFinish::kStop: return "stop";
    case EngineFinish::kLength: return "length";
    case EngineFinish::kCancelled: return "cancelled";
    case EngineFinish::kTimeout: return "timeout";
    case EngineFinish::kError: return "error";
  }
  return "?";
}


// ---------------------------------------------------------------------------------------------
// Loading

void Engine::Impl::load_model() {
  // A directory (Hugging Face) or a model file of a registered format (a .gguf file).
  SAMPAN_CHECK(std::filesystem::is_directory(model_dir) || models::model_format_of(model_dir) != "hf",
               ErrorCode::kNotFound, "{}: model directory does not exist", model_dir);
  const EngineOptions& o = options;
  SAMPAN_CHECK(o.block_size >= 1, ErrorCode::kInvalidArgument, "block_size must be >= 1, got {}",
               o.block_size);
  SAMPAN_CHECK(o.max_running >= 1, ErrorCode::kInvalidArgument,
               "max_running must be >= 1, got {}", o.max_running);
  SAMPAN_CHECK(o.max_batched_tokens >= 1, ErrorCode::kInvalidArgument,
               "max_batched_tokens must be >= 1, got {}", o.max_batched_tokens);
  SAMPAN_CHECK(o.max_waiting >= 0, ErrorCode::kInvalidArgument,
               "max_waiting must be >= 0, got {}", o.max_waiting);
  SAMPAN_CHECK(o.request_timeout_s >= 0, ErrorCode::kInvalidArgument,
               "request_timeout_s must be >= 0, got {}", o.request_timeout_s);
  SAMPAN_CHECK(o.max_model_len >= 0, ErrorCode::kInvalidArgument,
               "max_model_len must be >= 0, got {}", o.max_model_len);
  SAMPAN_CHECK(o.num_kv_blocks >= 0, ErrorCode::kInvalidArgument,
               "num_kv_blocks must be >= 0, got {}", o.num_kv_blocks);

  require_device(o.device);  // before any file is read: one line when there is no GPU
  runner = std::make_unique<ModelRunner>(
      models::load_model(model_dir, {.build = o.build, .optimize = o.optimize}), options);
  const models::Model& model = runner->model();
  const HfConfig& config = model.config;
  info = {model.architecture, config.vocab_size,       config.n_layer,
          config.n_head,      config.n_head_kv,        config.head_dim,
          config.max_position_embeddings};
  tokenizer = tok::load_tokenizer(model_dir);

  const int64_t model_max = config.max_position_embeddings;
  if (o.max_model_len > 0) {
    SAMPAN_CHECK(model_max <= 0 || o.max_model_len <= model_max, ErrorCode::kInvalidArgument,
                 "max_model_len {} exceeds the model's max_position_embeddings {}",
                 o.max_model_len, model_max);
    max_model_len = o.max_model_len;
  } else {
    max_model_len = model_max > 0 ? std::min<int64_t>(model_max, 8192) : 8192;
  }
  SAMPAN_CHECK(max_model_len >= 2, ErrorCode::kInvalidArgument,
               "max_model_len must be >= 2, got {}", max_model_len);

  // One K and one V row per layer and token, in the chosen format: a quantized cache fits more
  // blocks into the same kv_cache_bytes.
  const int64_t block_bytes = model.kv_block_bytes(o.block_size);
  const int64_t need = (max_model_len + o.block_size - 1) / o.block_size;
  if (o.num_kv_blocks > 0) {
    num_blocks = o.num_kv_blocks;
    SAMPAN_CHECK(num_blocks >= need, ErrorCode::kInvalidArgument,
                 "num_kv_blocks {} cannot hold one sequence of max_model_len {} tokens ({} "
                 "blocks of {})", num_blocks, max_model_len, need, o.block_size);
  } else {
    num_blocks = o.kv_cache_bytes / block_bytes;
    SAMPAN_CHECK(num_blocks >= need, ErrorCode::kInvalidArgument,
                 "kv_cache_bytes {} holds {} blocks; one sequence of max_model_len {} tokens "
                 "needs {} ({} bytes each)", o.kv_cache_bytes, num_blocks, max_model_len, need,
                 block_bytes);
  }
  // The pools first: an absurd kv_cache_bytes then fails on the device allocation, named, before
  // the block manager sizes its host tables for that many blocks.
  runner->allocate_kv(num_blocks, max_model_len);

  blocks = std::make_unique<BlockManager>(num_blocks, o.block_size, o.prefix_cache);
  scheduler = std::make_unique<Scheduler>(options, *blocks);
  output = std::make_unique<OutputProcessor>(*blocks, config.vocab_size, max_model_len,
                                             [this] { on_final_event(); }, &runner->host_runner());
  waiting_queue.pop_front = [this]() -> std::unique_ptr<Sequence> {
    std::lock_guard<std::mutex> lock(mu);
    if (waiting.empty()) return nullptr;
    std::unique_ptr<Sequence> s = std::move(waiting.front());
    waiting.pop_front();
    return s;
  };
  waiting_queue.push_front = [this](std::unique_ptr<Sequence> s) {
    std::lock_guard<std::mutex> lock(mu);
    waiting.push_front(std::move(s));
  };

  const tok::SpecialTokens& sp = tokenizer->special();
  eos_ids.insert(eos_ids.end(), sp.eos_ids.begin(), sp.eos_ids.end());
  if (sp.eos) eos_ids.push_back(*sp.eos);
  for (int64_t id : config.eos_token_ids) eos_ids.push_back(static_cast<int32_t>(id));

  published.kv_blocks_total = num_blocks;
  published.lora_requests.assign(options.build.lora.size(), 0);
  published.kv_cache_bytes = runner->kv_pool_bytes();
  published.kv_bytes_per_token = 2 * model.n_kv_layers * model.kv_row_bytes();
  log::info("engine: {} KV blocks of {} tokens ({:.1f} MiB, {}), max_model_len {}", num_blocks,
            o.block_size, static_cast<double>(num_blocks * block_bytes) / (1 << 20),
            kv_dtype_name(model.kv_dtype), max_model_len);
}

// ---------------------------------------------------------------------------------------------
// Caller-side API

std::unique_ptr<Sequence> Engine::Impl::validate(EngineRequest&& req, EventCallback&& cb) const {
  const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
  SAMPAN_CHECK(n_prompt >= 1, ErrorCode::kInvalidArgument, "prompt must have at least 1 token");
  SAMPAN_CHECK(n_prompt < max_model_len, ErrorCode::kInvalidArgument,
               "prompt has {} tokens; max_model_len {} allows at most {}", n_prompt,
               max_model_len, max_model_len - 1);
  const int64_t vocab = info.vocab_size;
  for (size_t i = 0; i < req.prompt.size(); ++i) {
    SAMPAN_CHECK(req.prompt[i] >= 0 && req.prompt[i] < vocab, ErrorCode::kInvalidArgument,
                 "prompt token {} ({}) is outside the vocabulary of {}", i, req.prompt[i], vocab);
  }
  SAMPAN_CHECK(req.max_tokens >= 1, ErrorCode::kInvalidArgument,
               "max_tokens must be >= 1, got {}", req.max_tokens);
  SAMPAN_CHECK(req.prompt_logprobs >= -1 && req.prompt_logprobs <= kMaxTopLogprobs,
               ErrorCode::kInvalidArgument, "prompt_logprobs must be in [-1, {}], got {}",
               kMaxTopLogprobs, req.prompt_logprobs);
  SAMPAN_CHECK(req.timeout_s >= 0, ErrorCode::kInvalidArgument,
               "timeout_s must be >= 0, got {}", req.timeout_s);
  for (size_t i = 0; i < req.stop_ids.size(); ++i) {
    SAMPAN_CHECK(req.stop_ids[i] >= 0 && req.stop_ids[i] < vocab, ErrorCode::kInvalidArgument,
                 "stop_ids[{}] ({}) is outside the vocabulary of {}", i, req.stop_ids[i], vocab);
  }
  for (size_t i = 0; i < req.stop.size(); ++i) {
    SAMPAN_CHECK(!req.stop[i].empty(), ErrorCode::kInvalidArgument, "stop[{}] is empty", i);
  }
  check_logit_bias_ids(req.sampling, vocab);
  const auto n_lora = static_cast<int32_t>(options.build.lora.size());
  SAMPAN_CHECK(req.lora >= -1 && req.lora < n_lora, ErrorCode::kInvalidArgument,
               "LoRA adapter {} requested; the engine has {} (-1: the base model)", req.lora,
               n_lora);
  auto s = std::make_unique<Sequence>();
  s->lora_adapter = req.lora;
  s->blocks.ns = req.lora + 1;
  s->sampler = std::make_unique<Sampler>(req.sampling);  // throws naming the bad parameter
  SAMPAN_CHECK(!(req.json_object && req.grammar), ErrorCode::kInvalidArgument,
               "JSON mode and a grammar (json_schema) were both requested; choose one");
  if (req.json_object || req.grammar) {
    std::call_once(token_bytes_once, [&] { token_bytes = TokenBytes::build(*tokenizer); });
  }
  if (req.json_object) {
    s->sampler->set_constraint(std::make_unique<JsonConstraint>(token_bytes, eos_ids));
  } else if (req.grammar) {
    s->sampler->set_constraint(std::make_unique<GrammarConstraint>(req.grammar, token_bytes,
                                                                   eos_ids, "response_format"));
  }
  s->device_sampling = runner->device_sampling() && device_sampling_eligible(req.sampling) &&
                       !req.json_object && !req.grammar && req.prompt_logprobs < 0;
  if (req.sampling.seed) {
    s->device_seed = *req.sampling.seed;
  } else if (s->device_sampling) {
    std::random_device rd;
    s->device_seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  s->stops = std::make_unique<StopMatcher>(req.stop);
  s->decoder = std::make_unique<tok::StreamDecoder>(*tokenizer, req.skip_special_tokens);
  s->stop_ids = req.stop_ids;
  if (!req.ignore_eos) s->stop_ids.insert(s->stop_ids.end(), eos_ids.begin(), eos_ids.end());
  s->tokens = req.prompt;
  s->n_prompt = n_prompt;
  s->submitted = EngineClock::now();
  const double limit = req.timeout_s > 0 ? req.timeout_s : options.request_timeout_s;
  if (limit > 0) {
    s->deadline = s->submitted + std::chrono::duration_cast<EngineClock::duration>(
                                     std::chrono::duration<double>(limit));
  }
  s->request = std::move(req);
  s->on_event = std::move(cb);
  return s;
}

std::unique_ptr<Engine> Engine::load(const std::string& model_dir, const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->model_dir = model_dir;
  impl->load_model();
  Impl* p = impl.get();
  std::unique_ptr<Engine> engine(new Engine(std::move(impl)));
  p->thread = std::thread([p] { p->thread_main(); });
  return engine;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
    impl_->accepting = false;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint64_t Engine::submit(EngineRequest request, EventCallback on_event) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    SAMPAN_CHECK(m.accepting, ErrorCode::kUnavailable, "the engine is shutting down");
  }
  std::unique_ptr<Sequence> s = m.validate(std::move(request), std::move(on_event));
  uint64_t handle = 0;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    SAMPAN_CHECK(m.accepting, ErrorCode::kUnavailable, "the engine is shutting down");
    const int64_t n_waiting = static_cast<int64_t>(m.waiting.size()) + m.n_preempted_shared;
    SAMPAN_CHECK(n_waiting < m.options.max_waiting, ErrorCode::kResourceExhausted,
                 "the waiting queue is full ({} requests, max_waiting {})", n_waiting,
                 m.options.max_waiting);
    handle = m.next_handle++;
    s->handle = handle;
    if (s->lora_adapter >= 0) ++m.published.lora_requests[static_cast<size_t>(s->lora_adapter)];
    m.waiting.push_back(std::move(s));
    ++m.n_active;
    m.published.waiting = static_cast<int>(m.waiting.size()) + m.n_preempted_shared;
  }
  m.wake.notify_one();
  return handle;
}

void Engine::cancel(uint64_t handle) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->cancel_requests.insert(handle);
  }
  impl_->wake.notify_one();
}

void Engine::cancel_all() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->cancel_everything = true;
  }
  impl_->wake.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  EngineStats s = impl_->published;
  s.accepting = impl_->accepting;
  return s;
}

void Engine::set_step_observer(std::function<void(const StepStats&)> observer) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->step_observer = std::move(observer);
}

void Engine::begin_shutdown() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->accepting = false;
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->idle.wait_for(lock, timeout, [&] { return impl_->n_active == 0; });
}

const Engine::ModelInfo& Engine::model_info() const { return impl_->info; }
const tok::Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
const std::string& Engine::model_dir() const { return impl_->model_dir; }
int64_t Engine::max_model_len() const { return impl_->max_model_len; }
const EngineOptions& Engine::options() const { return impl_->options; }

// ---------------------------------------------------------------------------------------------
// Engine thread

void Engine::Impl::thread_main() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      // Sleep while there is nothing to run; running sequences always have a next step.
      wake.wait(lock, [&] {
        return stop || !waiting.empty() || !cancel_requests.empty() || cancel_everything ||
               !scheduler->running().empty() || !scheduler->preempted().empty();
      });
      if (stop) {
        cancel_everything = true;
      }
    }
    step();
    std::lock_guard<std::mutex> lock(mu);
    if (stop && scheduler->running().empty() && scheduler->preempted().empty() &&
        waiting.empty()) {
      break;
    }
  }
}

// After every final event (OutputProcessor::finish): published with the count so that a caller
// woken by wait_idle() sees the freed blocks.
void Engine::Impl::on_final_event() {
  const BlockManagerStats b = blocks->stats();
  {
    std::lock_guard<std::mutex> lock(mu);
    --n_active;
    published.kv_blocks_used = b.used_blocks;
    published.kv_usage = static_cast<double>(b.used_blocks) / static_cast<double>(b.num_blocks);
    if (n_active == 0) published.running = published.waiting = 0;
  }
  idle.notify_all();
}

void Engine::Impl::take_cancellations() {
  std::unordered_set<uint64_t> cancels;
  bool all = false;
  std::deque<std::unique_ptr<Sequence>> queued;
  {
    std::lock_guard<std::mutex> lock(mu);
    cancels.swap(cancel_requests);
    all = cancel_everything;
    cancel_everything = false;
    // Waiting requests that are cancelled or timed out leave the shared queue here.
    const auto now = EngineClock::now();
    for (auto it = waiting.begin(); it != waiting.end();) {
      Sequence& s = **it;
      if (all || cancels.count(s.handle) || (s.deadline && now >= *s.deadline)) {
        queued.push_back(std::move(*it));
        it = waiting.erase(it);
      } else {
        ++it;
      }
    }
  }
  const auto now = EngineClock::now();
  auto why = [&](const Sequence& s) -> std::optional<EngineFinish> {
    if (all || cancels.count(s.handle)) return EngineFinish::kCancelled;
    if (s.deadline && now >= *s.deadline) return EngineFinish::kTimeout;
    return std::nullopt;
  };
  for (auto& q : queued) {
    output->finish(*q, why(*q).value_or(EngineFinish::kCancelled), {});
  }
  auto sweep = [&](auto& list) {
    for (auto it = list.begin(); it != list.end();) {
      if (auto w = why(**it)) {
        output->finish(**it, *w, {});
        it = list.erase(it);
      } else {
        ++it;
      }
    }
  };
  sweep(scheduler->running());
  sweep(scheduler->preempted());
}

void Engine::Impl::publish_stats() {
  const BlockManagerStats b = blocks->stats();
  const size_t n_running = scheduler->running().size();
  const size_t n_preempted = scheduler->preempted().size();
  std::lock_guard<std::mutex> lock(mu);
  n_preempted_shared = static_cast<int>(n_preempted);
  published.running = static_cast<int>(n_running);
  published.waiting = static_cast<int>(waiting.size() + n_preempted);
  published.kv_blocks_total = b.num_blocks;
  published.kv_blocks_used = b.used_blocks;
  published.kv_usage = blocks->usage();
  published.prefix_query_tokens = b.prefix_query_tokens;
  published.prefix_hit_tokens = b.prefix_hit_tokens;
  published.preemptions = scheduler->preemptions();
  published.steps = steps;
  published.cuda_graph_replays = runner->graph_stats().replays;
  published.cuda_graph_captures = runner->graph_stats().captures;
}

// One step: cancellations and timeouts, the plan, the forward, the outputs.
void Engine::Impl::step() {
  take_cancellations();
  StepPlan& plan = scheduler->plan(waiting_queue);
  if (!plan.batch.empty()) {
    const auto t0 = EngineClock::now();
    const StepOutput out = runner->run(plan);
    const auto t1 = EngineClock::now();
    scheduler->remove_finished(output->process(plan, out));
    ++steps;
    const StepStats st{static_cast<int>(plan.batch.size()), plan.n_decode, plan.n_tokens,
                       seconds_since(t0), seconds_since(t1)};
    std::function<void(const StepStats&)> observer;
    {
      std::lock_guard<std::mutex> lock(mu);
      observer = step_observer;
    }
    if (observer) observer(st);
  }
  publish_stats();
}

}  // namespace sampan::runtime
