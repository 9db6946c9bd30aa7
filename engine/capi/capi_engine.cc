// SampanEngine, SampanParams, SampanRequest and SampanEvent: the generation half of the C API,
// a thin layer over runtime::Engine.
//
// Every request object outlives the engine's interest in it (the engine's event callback holds
// a shared_ptr), and the user's handle to it is independent: destroying the handle detaches the
// user callback (under the request's callback mutex, so no call is in progress when destroy
// returns) and cancels the engine request.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "engine/capi/capi_config.h"
#include "engine/capi/capi_internal.h"
#include "engine/core/error.h"
#include "engine/models/lora_adapter.h"
#include "engine/runtime/device_select.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/json_schema.h"
#include "engine/runtime/sampling_limits.h"

namespace sampan::capi {
namespace {

struct EngineObj {
  // Calls hold it shared while they use `engine`; destroy takes it exclusively only to move the
  // engine out, then destroys it unlocked (its final events may call sampan_request_cancel).
  std::shared_mutex mu;
  std::unique_ptr<runtime::Engine> engine;
  std::vector<std::string> lora_names;  // EngineOptions::build.lora order; set at creation
};

struct Params {
  std::mutex mu;
  runtime::SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool json_object = false;
  std::shared_ptr<const runtime::Grammar> grammar;  // json_schema, compiled
  std::string lora;  // adapter name; "" for the base model
  bool prompt_logprobs = false;
};

struct EventData {
  int32_t token = -1;
  std::string text;
  float logprob = 0.0f;
  std::vector<float> prompt_logprobs;  // the first event's, when asked for
  bool finished = false;
  SampanFinishReason reason = SAMPAN_FINISH_NONE;
  const char* finish_name = "";  // runtime::engine_finish_name once finished
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_prompt_tokens = 0;
  std::string error;
};

struct RequestObj {
  std::weak_ptr<EngineObj> engine;
  uintptr_t self = 0;
  SampanEventCallback callback = nullptr;
  void* user_data = nullptr;

  std::mutex mu;  // everything below except cb_mu / detached
  std::condition_variable cv;
  std::deque<std::shared_ptr<EventData>> queue;  // poll mode
  bool finished = false;        // the final event was produced
  bool end_delivered = false;   // poll returned the final event
  uintptr_t current_event = 0;  // poll: handle of the event last returned
  bool submitted = false;       // engine_handle is valid
  bool cancel_pending = false;  // cancel asked before submit() returned
  uint64_t engine_handle = 0;
  bool destroyed = false;       // the handle is gone: queue nothing more

  std::mutex cb_mu;       // held while the user callback runs
  bool detached = false;  // under cb_mu: no more callbacks
};

// The request whose callback this thread is running (destroying it from there must not wait
// for cb_mu, which this thread holds).
thread_local RequestObj* t_callback_request = nullptr;

SampanFinishReason finish_reason(runtime::EngineFinish f) {
  switch (f) {
    case runtime::EngineFinish::kStop: return SAMPAN_FINISH_STOP;
    case runtime::EngineFinish::kLength: return SAMPAN_FINISH_LENGTH;
    case runtime::EngineFinish::kCancelled: return SAMPAN_FINISH_CANCELLED;
    case runtime::EngineFinish::kTimeout: return SAMPAN_FINISH_TIMEOUT;
    case runtime::EngineFinish::kError: return SAMPAN_FINISH_ERROR;
  }
  return SAMPAN_FINISH_ERROR;
}

std::shared_ptr<EventData> convert(const runtime::EngineEvent& e) {
  auto d = std::make_shared<EventData>();
  d->token = e.token;
  d->text = e.text;
  d->logprob = e.sample.logprob;
  d->prompt_logprobs.reserve(e.prompt_logprobs.size());
  for (const runtime::SampleResult& p : e.prompt_logprobs) d->prompt_logprobs.push_back(p.logprob);
  d->finished = e.finished;
  if (e.finished) {
    d->reason = finish_reason(e.finish);
    d->finish_name = runtime::engine_finish_name(e.finish);
    d->prompt_tokens = e.usage.prompt_tokens;
    d->completion_tokens = e.usage.completion_tokens;
    d->cached_prompt_tokens = e.usage.cached_prompt_tokens;
    d->error = e.error;
  }
  return d;
}

// Runs on the engine thread for every event of `req`. Must not throw into the engine.
void deliver(const std::shared_ptr<RequestObj>& req, const runtime::EngineEvent& e) noexcept {
  try {
    std::shared_ptr<EventData> ev = convert(e);
    if (req->callback != nullptr) {
      std::lock_guard<std::mutex> cb_lock(req->cb_mu);
      if (!req->detached) {
        const uintptr_t h = register_handle(Kind::kEvent, ev);
        CallbackScope scope;
        RequestObj* const outer = t_callback_request;
        t_callback_request = req.get();
        req->callback(as_handle<SampanRequest>(req->self), as_handle<const SampanEvent>(h),
                      req->user_data);
        t_callback_request = outer;
        unregister_handle(h);
      }
    }
    std::lock_guard<std::mutex> lock(req->mu);
    if (req->callback == nullptr && !req->destroyed) req->queue.push_back(ev);
    if (ev->finished) req->finished = true;
    req->cv.notify_all();
  } catch (...) {
    // Out of memory while queueing: the request can only be left to its final event.
  }
}

void refuse_in_callback(const char* what) {
  if (in_callback()) {
    api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
             "{} cannot be called from a generation callback (it runs on the engine thread)",
             what);
  }
}

// The engine of a handle, with its lock held shared.
struct LockedEngine {
  std::shared_ptr<EngineObj> obj;
  std::shared_lock<std::shared_mutex> lock;
  runtime::Engine* engine = nullptr;
};

LockedEngine lock_engine(const SampanEngine* handle) {
  LockedEngine l;
  l.obj = lookup<EngineObj>(handle, Kind::kEngine, "engine");
  l.lock = std::shared_lock<std::shared_mutex>(l.obj->mu);
  l.engine = l.obj->engine.get();
  if (l.engine == nullptr) api_fail(SAMPAN_ERROR_INVALID_HANDLE, "engine was destroyed");
  return l;
}

void cancel_request(RequestObj& req) {
  uint64_t handle = 0;
  {
    std::lock_guard<std::mutex> lock(req.mu);
    if (req.finished) return;
    if (!req.submitted) {
      req.cancel_pending = true;
      return;
    }
    handle = req.engine_handle;
  }
  std::shared_ptr<EngineObj> eng = req.engine.lock();
  if (!eng) return;
  std::shared_lock<std::shared_mutex> lock(eng->mu);
  if (eng->engine) eng->engine->cancel(handle);
}

runtime::EngineRequest make_request(const SampanParams* params) {
  runtime::EngineRequest r;
  if (params == nullptr) return r;
  auto p = lookup<Params>(params, Kind::kParams, "params");
  std::lock_guard<std::mutex> lock(p->mu);
  r.sampling = p->sampling;
  r.max_tokens = p->max_tokens;
  r.stop = p->stop;
  r.ignore_eos = p->ignore_eos;
  r.json_object = p->json_object;
  r.grammar = p->grammar;
  if (p->prompt_logprobs) r.prompt_logprobs = 0;
  return r;
}

// The engine's index of the adapter the params name (-1: the base model).
int32_t lora_index(const EngineObj& obj, const SampanParams* params) {
  if (params == nullptr) return -1;
  auto p = lookup<Params>(params, Kind::kParams, "params");
  std::lock_guard<std::mutex> lock(p->mu);
  if (p->lora.empty()) return -1;
  for (size_t i = 0; i < obj.lora_names.size(); ++i) {
    if (obj.lora_names[i] == p->lora) return static_cast<int32_t>(i);
  }
  std::string known;
  for (const std::string& n : obj.lora_names) known += (known.empty() ? "" : ", ") + n;
  api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "LoRA adapter '{}' is not loaded (the engine has: {})",
           p->lora, known.empty() ? "none" : known);
}

SampanStatus submit(SampanEngine* engine, runtime::EngineRequest request,
                    const SampanParams* params, SampanEventCallback callback, void* user_data,
                    SampanRequest** out) {
  static std::atomic<uint64_t> counter{0};
  LockedEngine l = lock_engine(engine);
  request.lora = lora_index(*l.obj, params);
  auto req = std::make_shared<RequestObj>();
  req->engine = l.obj;
  req->callback = callback;
  req->user_data = user_data;
  // Registered before submit(): the first callback may run before submit() returns.
  req->self = register_handle(Kind::kRequest, req);
  request.id = "capi-" + std::to_string(++counter);
  uint64_t handle = 0;
  try {
    handle = l.engine->submit(std::move(request),
                              [req](const runtime::EngineEvent& e) { deliver(req, e); });
  } catch (...) {
    unregister_handle(req->self);
    throw;
  }
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> lock(req->mu);
    req->engine_handle = handle;
    req->submitted = true;
    cancel_now = req->cancel_pending;
  }
  if (cancel_now) l.engine->cancel(handle);
  *out = as_handle<SampanRequest>(req->self);
  return SAMPAN_OK;
}

template <typename F>
SampanStatus with_params(SampanParams* params, F&& set) {
  return guarded([&] {
    auto p = lookup<Params>(params, Kind::kParams, "params");
    std::lock_guard<std::mutex> lock(p->mu);
    set(*p);
  });
}

std::shared_ptr<EventData> get_event(const SampanEvent* event) {
  return lookup<EventData>(event, Kind::kEvent, "event");
}

}  // namespace
}  // namespace sampan::capi

using namespace sampan;
using namespace sampan::capi;

extern "C" {

SAMPAN_API SampanStatus sampan_engine_create(const SampanConfig* config, SampanEngine** out) {
  return guarded([&] {
    refuse_in_callback("sampan_engine_create");
    const ConfigData c = snapshot_config(config);
    require_arg(out, "out");
    c.require_model_dir();
    runtime::EngineOptions o;
    o.threads = c.threads;
    o.max_model_len = c.max_model_len;
    o.kv_cache_bytes = c.kv_cache_bytes;
    o.max_running = c.max_batch_size;
    o.build = c.build_options();
    o.device = runtime::parse_device(c.device);
    auto obj = std::make_shared<EngineObj>();
    for (const ConfigData::Lora& l : c.lora) {
      auto adapter = std::make_shared<models::LoraAdapter>(models::load_lora_adapter(l.dir));
      adapter->name = l.name;
      o.build.lora.push_back(std::move(adapter));
      obj->lora_names.push_back(l.name);
    }
    obj->engine = runtime::Engine::load(c.model_dir, o);
    *out = as_handle<SampanEngine>(register_handle(Kind::kEngine, obj));
  });
}

SAMPAN_API SampanStatus sampan_engine_destroy(SampanEngine* engine) {
  return guarded([&] {
    if (engine == nullptr) return;
    refuse_in_callback("sampan_engine_destroy");
    auto obj = take<EngineObj>(engine, Kind::kEngine, "engine");
    std::unique_ptr<runtime::Engine> doomed;
    {
      std::unique_lock<std::shared_mutex> lock(obj->mu);
      doomed = std::move(obj->engine);
    }
    // Joins the engine thread; requests in flight receive their final kCancelled event.
    doomed.reset();
  });
}

SAMPAN_API SampanStatus sampan_engine_get_vocab_size(SampanEngine* engine, int64_t* out) {
  return guarded([&] {
    LockedEngine l = lock_engine(engine);
    require_arg(out, "out");
    *out = l.engine->model_info().vocab_size;
  });
}

SAMPAN_API SampanStatus sampan_engine_get_max_model_len(SampanEngine* engine, int64_t* out) {
  return guarded([&] {
    LockedEngine l = lock_engine(engine);
    require_arg(out, "out");
    *out = l.engine->max_model_len();
  });
}

SAMPAN_API SampanStatus sampan_engine_tokenize(SampanEngine* engine, const char* text,
                                               int32_t add_special, int32_t* ids,
                                               int64_t capacity, int64_t* n_ids) {
  return guarded([&] {
    refuse_in_callback("sampan_engine_tokenize");
    LockedEngine l = lock_engine(engine);
    require_arg(text, "text");
    require_arg(n_ids, "n_ids");
    const std::vector<int32_t> v = l.engine->tokenizer().encode(text, add_special != 0);
    const int64_t n = static_cast<int64_t>(v.size());
    *n_ids = n;
    if (ids == nullptr && capacity == 0) return;  // a query of the count
    if (capacity < n) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "{} ids do not fit in capacity {}", n, capacity);
    }
    if (n > 0) require_arg(ids, "ids");
    std::copy(v.begin(), v.end(), ids);
  });
}

SAMPAN_API SampanStatus sampan_params_create(SampanParams** out) {
  return guarded([&] {
    require_arg(out, "out");
    *out = as_handle<SampanParams>(register_handle(Kind::kParams, std::make_shared<Params>()));
  });
}

SAMPAN_API SampanStatus sampan_params_destroy(SampanParams* params) {
  return guarded([&] {
    if (params != nullptr) take<Params>(params, Kind::kParams, "params");
  });
}

// The setters check with the engine's own limits (sampling_limits.h): an out-of-range value is
// SAMPAN_ERROR_INVALID_ARGUMENT naming the parameter.
SAMPAN_API SampanStatus sampan_params_set_temperature(SampanParams* params, float temperature) {
  return with_params(params, [&](Params& p) {
    runtime::check_sampling_param(runtime::SamplingParam::kTemperature, temperature);
    p.sampling.temperature = temperature;
  });
}

SAMPAN_API SampanStatus sampan_params_set_top_k(SampanParams* params, int32_t top_k) {
  return with_params(params, [&](Params& p) {
    runtime::check_sampling_param(runtime::SamplingParam::kTopK, top_k);
    p.sampling.top_k = top_k;
  });
}

SAMPAN_API SampanStatus sampan_params_set_top_p(SampanParams* params, float top_p) {
  return with_params(params, [&](Params& p) {
    runtime::check_sampling_param(runtime::SamplingParam::kTopP, top_p);
    p.sampling.top_p = top_p;
  });
}

SAMPAN_API SampanStatus sampan_params_set_seed(SampanParams* params, uint64_t seed) {
  return with_params(params, [&](Params& p) { p.sampling.seed = seed; });
}

SAMPAN_API SampanStatus sampan_params_set_max_tokens(SampanParams* params, int64_t max_tokens) {
  return with_params(params, [&](Params& p) {
    if (max_tokens < 1) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "max_tokens must be >= 1, got {}", max_tokens);
    }
    p.max_tokens = max_tokens;
  });
}

SAMPAN_API SampanStatus sampan_params_add_stop(SampanParams* params, const char* stop) {
  return with_params(params, [&](Params& p) {
    require_arg(stop, "stop");
    if (*stop == '\0') api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "a stop string must not be empty");
    p.stop.emplace_back(stop);
  });
}

SAMPAN_API SampanStatus sampan_params_clear_stops(SampanParams* params) {
  return with_params(params, [&](Params& p) { p.stop.clear(); });
}

SAMPAN_API SampanStatus sampan_params_add_logit_bias(SampanParams* params, int32_t token_id,
                                                     float bias) {
  return with_params(params, [&](Params& p) {
    runtime::check_logit_bias_entry(token_id, bias, "logit_bias", "logit_bias");
    p.sampling.logit_bias.emplace_back(token_id, bias);
  });
}

SAMPAN_API SampanStatus sampan_params_clear_logit_bias(SampanParams* params) {
  return with_params(params, [&](Params& p) { p.sampling.logit_bias.clear(); });
}

SAMPAN_API SampanStatus sampan_params_set_json_object(SampanParams* params,
                                                      int32_t json_object) {
  return with_params(params, [&](Params& p) {
    p.json_object = json_object != 0;
    if (p.json_object) p.grammar.reset();
  });
}

SAMPAN_API SampanStatus sampan_params_set_json_schema(SampanParams* params, const char* schema) {
  return with_params(params, [&](Params& p) {
    if (schema == nullptr || *schema == '\0') {
      p.grammar.reset();
      return;
    }
    p.grammar = runtime::compile_json_schema(schema, "json_schema");
    p.json_object = false;
  });
}

SAMPAN_API SampanStatus sampan_params_set_ignore_eos(SampanParams* params, int32_t ignore_eos) {
  return with_params(params, [&](Params& p) { p.ignore_eos = ignore_eos != 0; });
}

SAMPAN_API SampanStatus sampan_params_set_prompt_logprobs(SampanParams* params,
                                                          int32_t prompt_logprobs) {
  return with_params(params, [&](Params& p) { p.prompt_logprobs = prompt_logprobs != 0; });
}

SAMPAN_API SampanStatus sampan_params_set_lora(SampanParams* params, const char* name) {
  return with_params(params, [&](Params& p) { p.lora = name == nullptr ? "" : name; });
}

SAMPAN_API SampanStatus sampan_engine_submit_text(SampanEngine* engine, const char* prompt,
                                                  const SampanParams* params,
                                                  SampanEventCallback callback, void* user_data,
                                                  SampanRequest** out) {
  return guarded([&] {
    refuse_in_callback("sampan_engine_submit_text");
    require_arg(prompt, "prompt");
    require_arg(out, "out");
    runtime::EngineRequest r = make_request(params);
    {
      LockedEngine l = lock_engine(engine);
      r.prompt = l.engine->tokenizer().encode(prompt, true);
    }
    submit(engine, std::move(r), params, callback, user_data, out);
  });
}

SAMPAN_API SampanStatus sampan_engine_submit_tokens(SampanEngine* engine, const int32_t* ids,
                                                    int64_t n_ids, const SampanParams* params,
                                                    SampanEventCallback callback,
                                                    void* user_data, SampanRequest** out) {
  return guarded([&] {
    refuse_in_callback("sampan_engine_submit_tokens");
    if (n_ids < 0) api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "n_ids must be >= 0, got {}", n_ids);
    if (n_ids > 0) require_arg(ids, "ids");
    require_arg(out, "out");
    runtime::EngineRequest r = make_request(params);
    if (n_ids > 0) r.prompt.assign(ids, ids + n_ids);
    submit(engine, std::move(r), params, callback, user_data, out);
  });
}

SAMPAN_API SampanStatus sampan_request_cancel(SampanRequest* request) {
  return guarded([&] {
    auto req = lookup<RequestObj>(request, Kind::kRequest, "request");
    cancel_request(*req);
  });
}

SAMPAN_API SampanStatus sampan_request_poll(SampanRequest* request, int32_t timeout_ms,
                                            const SampanEvent** out) {
  return guarded([&] {
    refuse_in_callback("sampan_request_poll");
    auto req = lookup<RequestObj>(request, Kind::kRequest, "request");
    require_arg(out, "out");
    if (req->callback != nullptr) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "the request was submitted with a callback; its events are not queued for poll");
    }
    std::unique_lock<std::mutex> lock(req->mu);
    if (req->current_event != 0) {
      unregister_handle(req->current_event);
      req->current_event = 0;
    }
    if (req->end_delivered) {
      api_fail(SAMPAN_ERROR_END_OF_STREAM, "the request's final event was already returned");
    }
    const auto ready = [&] { return !req->queue.empty(); };
    if (timeout_ms < 0) {
      req->cv.wait(lock, ready);
    } else if (!req->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
      api_fail(SAMPAN_ERROR_TIMEOUT, "no event within {} ms", timeout_ms);
    }
    std::shared_ptr<EventData> ev = std::move(req->queue.front());
    req->queue.pop_front();
    if (ev->finished) req->end_delivered = true;
    req->current_event = register_handle(Kind::kEvent, ev);
    *out = as_handle<const SampanEvent>(req->current_event);
  });
}

SAMPAN_API SampanStatus sampan_request_wait(SampanRequest* request, int32_t timeout_ms) {
  return guarded([&] {
    refuse_in_callback("sampan_request_wait");
    auto req = lookup<RequestObj>(request, Kind::kRequest, "request");
    std::unique_lock<std::mutex> lock(req->mu);
    const auto done = [&] { return req->finished; };
    if (timeout_ms < 0) {
      req->cv.wait(lock, done);
    } else if (!req->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
      api_fail(SAMPAN_ERROR_TIMEOUT, "the request did not finish within {} ms", timeout_ms);
    }
  });
}

SAMPAN_API SampanStatus sampan_request_destroy(SampanRequest* request) {
  return guarded([&] {
    if (request == nullptr) return;
    auto req = take<RequestObj>(request, Kind::kRequest, "request");
    if (t_callback_request == req.get()) {
      req->detached = true;  // this thread is inside the callback and holds cb_mu
    } else {
      std::lock_guard<std::mutex> cb_lock(req->cb_mu);
      req->detached = true;
    }
    cancel_request(*req);
    std::lock_guard<std::mutex> lock(req->mu);
    if (req->current_event != 0) unregister_handle(req->current_event);
    req->current_event = 0;
    req->queue.clear();
    req->destroyed = true;
  });
}

SAMPAN_API SampanStatus sampan_event_get_token(const SampanEvent* event, int32_t* out) {
  return guarded([&] {
    auto e = get_event(event);
    require_arg(out, "out");
    *out = e->token;
  });
}

SAMPAN_API SampanStatus sampan_event_get_text(const SampanEvent* event, const char** text,
                                              uint64_t* len) {
  return guarded([&] {
    auto e = get_event(event);
    require_arg(text, "text");
    *text = e->text.c_str();
    if (len != nullptr) *len = e->text.size();
  });
}

SAMPAN_API SampanStatus sampan_event_get_logprob(const SampanEvent* event, float* out) {
  return guarded([&] {
    auto e = get_event(event);
    require_arg(out, "out");
    *out = e->logprob;
  });
}

SAMPAN_API SampanStatus sampan_event_get_prompt_logprobs(const SampanEvent* event,
                                                         const float** logprobs, int64_t* n) {
  return guarded([&] {
    auto e = get_event(event);
    require_arg(logprobs, "logprobs");
    require_arg(n, "n");
    *logprobs = e->prompt_logprobs.empty() ? nullptr : e->prompt_logprobs.data();
    *n = static_cast<int64_t>(e->prompt_logprobs.size());
  });
}

SAMPAN_API SampanStatus sampan_event_is_finished(const SampanEvent* event, int32_t* out) {
  return guarded([&] {
    auto e = get_event(event);
    require_arg(out, "out");
    *out = e->finished ? 1 : 0;
  });
}

SAMPAN_API SampanStatus sampan_event_get_finish_reason(const SampanEvent* event,
                                                       SampanFinishReason* out) {
  return guarded([&] {
    auto e = get_event(event);
    require_arg(out, "out");
    *out = e->reason;
  });
}

SAMPAN_API SampanStatus sampan_event_get_finish_name(const SampanEvent* event, const char** out) {
  return guarded([&] {
    auto e = get_event(event);
    require_arg(out, "out");
    *out = e->finish_name;
  });
}

SAMPAN_API SampanStatus sampan_event_get_usage(const SampanEvent* event, int64_t* prompt_tokens,
                                               int64_t* completion_tokens,
                                               int64_t* cached_prompt_tokens) {
  return guarded([&] {
    auto e = get_event(event);
    if (prompt_tokens != nullptr) *prompt_tokens = e->prompt_tokens;
    if (completion_tokens != nullptr) *completion_tokens = e->completion_tokens;
    if (cached_prompt_tokens != nullptr) *cached_prompt_tokens = e->cached_prompt_tokens;
  });
}

SAMPAN_API SampanStatus sampan_event_get_error(const SampanEvent* event, const char** out) {
  return guarded([&] {
    auto e = get_event(event);
    require_arg(out, "out");
    *out = e->error.c_str();
  });
}

}  // extern "C"
