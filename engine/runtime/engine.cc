#include "engine/runtime/engine.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/passes.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/llama.h"
#include "engine/runtime/device_select.h"
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

namespace {

double seconds_since(EngineClock::time_point t0) {
  return std::chrono::duration<double>(EngineClock::now() - t0).count();
}

// A growable i32 buffer whose tensors view one allocation, so the per-step graph inputs cost no
// allocation once the largest batch has been seen.
class I32Input {
 public:
  int32_t* reserve(int64_t n) {
    if (!storage_ || capacity_ < n) {
      capacity_ = std::max<int64_t>(n, capacity_ * 2);
      storage_ = Storage::allocate(static_cast<size_t>(capacity_) * sizeof(int32_t), Device::cpu());
    }
    return static_cast<int32_t*>(storage_->data());
  }
  Tensor view(const Shape& shape) const { return Tensor::from_storage(storage_, 0, shape, DType::kI32); }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t capacity_ = 0;
};

// One scheduled piece of work: `n_tokens` tokens of `seq` starting at seq->n_computed.
struct Scheduled {
  Sequence* seq = nullptr;
  int64_t n_tokens = 0;
  int logit_row = -1;  // row of the logits output, or -1 when this chunk ends mid-prompt
  bool decode = false;
};

}  // namespace

struct Engine::Impl {
  EngineOptions options;
  std::string model_dir;
  HfConfig config;
  std::optional<WeightStore> store;  // mapped weights the graph's constants view
  models::LlamaWeights weights;
  graph::Graph graph;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<graph::Executor> executor;
  int64_t max_model_len = 0;
  int64_t num_blocks = 0;  // for sequences; the pools hold one more when pad_decode
  bool pad_decode = false;  // EngineOptions::pad_decode_steps, or CUDA graphs on a CUDA device
  std::vector<int32_t> eos_ids;  // tokenizer + config eos ids (generate.cc's rule)

  // Engine-thread state.
  std::unique_ptr<BlockManager> blocks;
  // Per layer [num_blocks, block_size, kv_dim] f32, or [.., kv_row_bytes] i8 for a quantized
  // cache (options.build.kv_cache_dtype).
  std::vector<Tensor> k_cache, v_cache;
  std::vector<std::unique_ptr<Sequence>> running;  // arrival order
  std::deque<std::unique_ptr<Sequence>> preempted;  // arrival order; admitted before `waiting`
  std::map<std::string, Tensor> inputs;
  I32Input in_ids, in_positions, in_seq_ids, in_block_tables, in_logit_rows;
  std::vector<Scheduled> batch;
  int64_t preemptions = 0;
  int64_t steps = 0;

  // Shared with caller threads, guarded by `mu`.
  mutable std::mutex mu;
  std::condition_variable wake;  // engine thread: work arrived, cancel, stop
  std::condition_variable idle;  // wait_idle()
  std::deque<std::unique_ptr<Sequence>> waiting;
  std::unordered_set<uint64_t> cancel_requests;
  bool cancel_everything = false;
  bool stop = false;
  bool accepting = true;
  int64_t n_active = 0;  // submitted and not yet given their final event
  int n_preempted_shared = 0;
  uint64_t next_handle = 1;
  EngineStats published;
  std::function<void(const StepStats&)> step_observer;

  std::thread thread;

  void load_model();
  void thread_main();
  void step();
  void take_cancellations();
  void schedule();
  bool admit_one(int64_t& budget);
  void preempt_last();
  void run_batch();
  bool fill_padded_decode();
  void fill_step(int64_t n_tokens, int64_t max_blocks, int n_out);
  void handle_logits(Sequence& s, const float* logits);
  void finish(Sequence& s, EngineFinish why, EngineEvent ev);
  void remove_finished(const std::unordered_set<const Sequence*>& done);
  void publish_stats();
  void emit(Sequence& s, const EngineEvent& ev);
  std::unique_ptr<Sequence> validate(EngineRequest&& req, EventCallback&& cb) const;
};

// ---------------------------------------------------------------------------------------------
// Loading

void Engine::Impl::load_model() {
  SAMPAN_CHECK(std::filesystem::is_directory(model_dir), ErrorCode::kNotFound,
               "{}: model directory does not exist", model_dir);
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
  config = load_hf_config(model_dir);
  store.emplace(WeightStore::open(model_dir));
  tokenizer = tok::load_tokenizer(model_dir);
  weights = models::load_llama_weights(config, *store, o.build);
  graph = models::build_llama_graph(config, weights, o.build);
  if (o.optimize) graph::passes::optimize(graph);
  pool = std::make_unique<ThreadPool>(o.threads);
  executor = std::make_unique<graph::Executor>(graph, *pool, o.device);
  executor->load_constants();
  executor->set_cuda_graphs(o.cuda_graphs);
  pad_decode = o.pad_decode_steps || (o.cuda_graphs && o.device.type == DeviceType::kCUDA);

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
  const cpu::KvDtype kv_dtype = o.build.kv_cache_dtype;
  const int64_t row_bytes = cpu::kv_row_bytes(kv_dtype, config.n_head_kv, config.head_dim);
  const int64_t block_bytes = 2 * config.n_layer * o.block_size * row_bytes;
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
  // the block manager sizes its host tables for that many blocks. Padded decode steps write
  // their padding tokens into block num_blocks, which the block manager never hands out.
  const int64_t pool_blocks = num_blocks + (pad_decode ? 1 : 0);
  for (int64_t l = 0; l < config.n_layer; ++l) {
    // The graph's pool contract (models/llama.h): f32 values, or raw i8 rows for the others.
    const bool f32 = kv_dtype == cpu::KvDtype::kF32;
    const Shape pool = {pool_blocks, o.block_size, f32 ? config.kv_dim() : row_bytes};
    const DType dtype = f32 ? DType::kF32 : DType::kI8;
    auto what = [&](const char* name) {
      return fmt::format("KV cache pool {}.{} ({} blocks of {} tokens)", name, l, pool_blocks,
                         o.block_size);
    };
    k_cache.push_back(allocate_named(pool, dtype, o.device, what("k_cache"), Fill::kZero));
    v_cache.push_back(allocate_named(pool, dtype, o.device, what("v_cache"), Fill::kZero));
    inputs[fmt::format("k_cache.{}", l)] = k_cache.back();
    inputs[fmt::format("v_cache.{}", l)] = v_cache.back();
  }

  blocks = std::make_unique<BlockManager>(num_blocks, o.block_size, o.prefix_cache);

  const tok::SpecialTokens& sp = tokenizer->special();
  eos_ids.insert(eos_ids.end(), sp.eos_ids.begin(), sp.eos_ids.end());
  if (sp.eos) eos_ids.push_back(*sp.eos);
  for (int64_t id : config.eos_token_ids) eos_ids.push_back(static_cast<int32_t>(id));

  published.kv_blocks_total = num_blocks;
  published.kv_cache_bytes = pool_blocks * block_bytes;
  published.kv_bytes_per_token = 2 * config.n_layer * row_bytes;
  log::info("engine: {} KV blocks of {} tokens ({:.1f} MiB, {}), max_model_len {}", num_blocks,
            o.block_size, static_cast<double>(num_blocks * block_bytes) / (1 << 20),
            cpu::kv_dtype_name(kv_dtype), max_model_len);
}

// ---------------------------------------------------------------------------------------------
// Caller-side API

std::unique_ptr<Sequence> Engine::Impl::validate(EngineRequest&& req, EventCallback&& cb) const {
  const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
  SAMPAN_CHECK(n_prompt >= 1, ErrorCode::kInvalidArgument, "prompt must have at least 1 token");
  SAMPAN_CHECK(n_prompt < max_model_len, ErrorCode::kInvalidArgument,
               "prompt has {} tokens; max_model_len {} allows at most {}", n_prompt,
               max_model_len, max_model_len - 1);
  const int64_t vocab = config.vocab_size;
  for (size_t i = 0; i < req.prompt.size(); ++i) {
    SAMPAN_CHECK(req.prompt[i] >= 0 && req.prompt[i] < vocab, ErrorCode::kInvalidArgument,
                 "prompt token {} ({}) is outside the vocabulary of {}", i, req.prompt[i], vocab);
  }
  SAMPAN_CHECK(req.max_tokens >= 1, ErrorCode::kInvalidArgument,
               "max_tokens must be >= 1, got {}", req.max_tokens);
  SAMPAN_CHECK(req.timeout_s >= 0, ErrorCode::kInvalidArgument,
               "timeout_s must be >= 0, got {}", req.timeout_s);
  for (size_t i = 0; i < req.stop_ids.size(); ++i) {
    SAMPAN_CHECK(req.stop_ids[i] >= 0 && req.stop_ids[i] < vocab, ErrorCode::kInvalidArgument,
                 "stop_ids[{}] ({}) is outside the vocabulary of {}", i, req.stop_ids[i], vocab);
  }
  for (size_t i = 0; i < req.stop.size(); ++i) {
    SAMPAN_CHECK(!req.stop[i].empty(), ErrorCode::kInvalidArgument, "stop[{}] is empty", i);
  }
  auto s = std::make_unique<Sequence>();
  s->sampler = std::make_unique<Sampler>(req.sampling);  // throws naming the bad parameter
  s->stops = std::make_unique<StopMatcher>(req.stop);
  s->decoder = std::make_unique<tok::StreamDecoder>(*tokenizer);
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

const HfConfig& Engine::config() const { return impl_->config; }
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
               !running.empty() || !preempted.empty();
      });
      if (stop) {
        cancel_everything = true;
      }
    }
    step();
    std::lock_guard<std::mutex> lock(mu);
    if (stop && running.empty() && preempted.empty() && waiting.empty()) break;
  }
}

void Engine::Impl::emit(Sequence& s, const EngineEvent& ev) {
  if (!s.on_event) return;
  try {
    s.on_event(ev);
  } catch (const std::exception& e) {
    // A caller's callback must not take the engine down with it.
    log::warn("request {}: event callback threw: {}", s.request.id, e.what());
  }
}

// Sends the final event and drops the sequence's blocks. The caller removes it from its list.
void Engine::Impl::finish(Sequence& s, EngineFinish why, EngineEvent ev) {
  blocks->release(s.blocks);
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
  const BlockManagerStats b = blocks->stats();
  {
    // Published with the count so that a caller woken by wait_idle() sees the freed blocks.
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
    finish(*q, why(*q).value_or(EngineFinish::kCancelled), {});
  }
  auto sweep = [&](auto& list) {
    for (auto it = list.begin(); it != list.end();) {
      if (auto w = why(**it)) {
        finish(**it, *w, {});
        it = list.erase(it);
      } else {
        ++it;
      }
    }
  };
  sweep(running);
  sweep(preempted);
}

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
  std::string error;
  try {
    // A padded decode step recurs with the same shapes: the executor replays it as a CUDA graph.
    const std::vector<Tensor> out = executor->run(inputs, /*recurring=*/padded);
    // The CPU sampler reads the logits on the host: a device output is copied back (only the
    // n_out rows the step asked for); a CPU output is read in place from the executor's arena.
    host_logits = out[0].device().type == DeviceType::kCPU ? out[0] : out[0].to(Device::cpu());
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
    const float* logits = host_logits.data<float>();
    const int64_t vocab = config.vocab_size;
    for (const Scheduled& b : batch) {
      Sequence& s = *b.seq;
      s.n_computed += b.n_tokens;
      blocks->commit(s.blocks, s.tokens, s.n_computed);
      if (b.logit_row < 0) continue;
      handle_logits(s, logits + static_cast<int64_t>(b.logit_row) * vocab);
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

// Samples the next token of `s` and streams it; on finishing, sends the final event (which marks
// the sequence finished for removal).
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

void Engine::Impl::publish_stats() {
  const BlockManagerStats b = blocks->stats();
  std::lock_guard<std::mutex> lock(mu);
  n_preempted_shared = static_cast<int>(preempted.size());
  published.running = static_cast<int>(running.size());
  published.waiting = static_cast<int>(waiting.size() + preempted.size());
  published.kv_blocks_total = b.num_blocks;
  published.kv_blocks_used = b.used_blocks;
  published.kv_usage = blocks->usage();
  published.prefix_query_tokens = b.prefix_query_tokens;
  published.prefix_hit_tokens = b.prefix_hit_tokens;
  published.preemptions = preemptions;
  published.steps = steps;
  published.cuda_graph_replays = executor->graph_stats().replays;
  published.cuda_graph_captures = executor->graph_stats().captures;
}

void Engine::Impl::step() {
  take_cancellations();
  schedule();
  if (!batch.empty()) run_batch();
  publish_stats();
}

}  // namespace sampan::runtime
